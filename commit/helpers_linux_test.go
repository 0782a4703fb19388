package commit

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
)

// testTrial is the trial id of every handcrafted delta.
const testTrial = "tr_testtrial0000000001"

// node is one entry of a host tree: what a test builds, expects or snapshots.
type node struct {
	kind     byte // 'f' file, 'd' dir, 'l' symlink, 'p' fifo
	mode     uint32
	data     string
	link     string
	uid, gid int
	ino      uint64 // set by snapshot only
}

func reg(data string, mode uint32) node { return node{kind: 'f', mode: mode, data: data} }
func dir(mode uint32) node              { return node{kind: 'd', mode: mode} }
func sym(target string) node            { return node{kind: 'l', mode: 0o777, link: target} }
func fifo(mode uint32) node             { return node{kind: 'p', mode: mode} }

func (n node) own(uid, gid int) node { n.uid, n.gid = uid, gid; return n }

func (n node) String() string {
	switch n.kind {
	case 'f':
		return fmt.Sprintf("file %04o %d:%d %q", n.mode, n.uid, n.gid, n.data)
	case 'd':
		return fmt.Sprintf("dir %04o %d:%d", n.mode, n.uid, n.gid)
	case 'l':
		return fmt.Sprintf("symlink %d:%d -> %q", n.uid, n.gid, n.link)
	case 'p':
		return fmt.Sprintf("fifo %04o %d:%d", n.mode, n.uid, n.gid)
	}
	return "?"
}

// tree maps slash-separated paths relative to a root to their entries.
type tree map[string]node

// with returns a copy of tr with the given entries set (a zero node deletes).
func (tr tree) with(kv ...any) tree {
	out := tree{}
	for k, v := range tr {
		out[k] = v
	}
	for i := 0; i < len(kv); i += 2 {
		k, n := kv[i].(string), kv[i+1].(node)
		if n.kind == 0 {
			delete(out, k)
		} else {
			out[k] = n
		}
	}
	return out
}

// build creates tr under root (which must exist), parents first.
func build(t testing.TB, root string, tr tree) {
	t.Helper()
	keys := make([]string, 0, len(tr))
	for k := range tr {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		n, p := tr[k], filepath.Join(root, k)
		var err error
		switch n.kind {
		case 'd':
			err = os.Mkdir(p, 0o700)
		case 'f':
			err = os.WriteFile(p, []byte(n.data), 0o600)
		case 'l':
			err = os.Symlink(n.link, p)
		case 'p':
			err = unix.Mkfifo(p, 0o600)
		default:
			err = fmt.Errorf("bad kind %q", n.kind)
		}
		if err == nil {
			err = os.Lchown(p, n.uid, n.gid)
		}
		if err == nil && n.kind != 'l' {
			err = unix.Chmod(p, n.mode) // after chown, which clears setuid
		}
		if err != nil {
			t.Fatalf("building %s: %v", k, err)
		}
	}
}

// snapshot reads the tree under root without following symlinks.
func snapshot(t testing.TB, root string) tree {
	t.Helper()
	out := tree{}
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == root {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		n := node{mode: st.Mode & 0o7777, uid: int(st.Uid), gid: int(st.Gid), ino: st.Ino}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			n.kind, n.data = 'f', string(b)
		case unix.S_IFDIR:
			n.kind = 'd'
		case unix.S_IFLNK:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			n.kind, n.link = 'l', l
		case unix.S_IFIFO:
			n.kind = 'p'
		default:
			return fmt.Errorf("%s: unexpected file type %o", p, st.Mode&unix.S_IFMT)
		}
		out[rel] = n
		return nil
	})
	if err != nil {
		t.Fatalf("snapshot %s: %v", root, err)
	}
	return out
}

// diffTrees lists how got differs from want; withIno also compares inode
// numbers (both must come from snapshots), which proves nothing was replaced.
func diffTrees(want, got tree, withIno bool) []string {
	var out []string
	for k, w := range want {
		g, ok := got[k]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s: missing, want %v", k, w))
		case g.kind != w.kind || g.data != w.data || g.link != w.link || g.uid != w.uid || g.gid != w.gid ||
			(w.kind != 'l' && g.mode != w.mode):
			out = append(out, fmt.Sprintf("%s: got %v, want %v", k, g, w))
		case withIno && g.ino != w.ino:
			out = append(out, fmt.Sprintf("%s: inode %d, want %d (replaced)", k, g.ino, w.ino))
		}
	}
	for k, g := range got {
		if _, ok := want[k]; !ok {
			out = append(out, fmt.Sprintf("%s: unexpected %v", k, g))
		}
	}
	slices.Sort(out)
	return out
}

func wantTree(t testing.TB, what string, want, got tree, withIno bool) {
	t.Helper()
	if d := diffTrees(want, got, withIno); len(d) > 0 {
		t.Errorf("%s differs:\n  %s", what, strings.Join(d, "\n  "))
	}
}

// leftovers lists every .dryexec-* name anywhere under dir.
func leftovers(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), ".dryexec-") {
			out = append(out, p)
		}
		return nil
	})
	return out
}

func noLeftovers(t testing.TB, dir, jdir string) {
	t.Helper()
	if l := leftovers(t, dir); len(l) > 0 {
		t.Errorf("temp/backup files left behind: %v", l)
	}
	if ents, _ := os.ReadDir(jdir); len(ents) > 0 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("journal dir not empty: %v", names)
	}
}

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

func modeStr(m uint32) string { return fmt.Sprintf("%04o", m) }

// fx is one test's host: base holds root (the host tree the deltas change) and
// outside (a dir a hostile symlink may point to); blobs is the trial's store.
type fx struct {
	t       testing.TB
	base    string
	root    string
	outside string
	jdir    string
	blobs   map[string][]byte
	// opened counts OpenBlob calls; failOpen makes the n-th (1-based) fail.
	opened   int
	failOpen int
	// corrupt serves wrong bytes for these hashes.
	corrupt map[string]bool
}

func newFx(t testing.TB, before tree) *fx {
	t.Helper()
	base := t.TempDir()
	f := &fx{t: t, base: base, root: filepath.Join(base, "host"), outside: filepath.Join(base, "outside"),
		jdir: filepath.Join(t.TempDir(), "journal"), blobs: map[string][]byte{}, corrupt: map[string]bool{}}
	for _, d := range []string{f.root, f.outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(f.outside, "precious"), []byte("outside\n"), 0o644)
	build(t, f.root, before)
	return f
}

// p is rel's absolute host path.
func (f *fx) p(rel string) string { return filepath.Join(f.root, rel) }

func (f *fx) put(data string) string {
	s := sha(data)
	f.blobs[s] = []byte(data)
	return s
}

func (f *fx) openBlob(s string) (io.ReadCloser, error) {
	f.opened++
	if f.opened == f.failOpen {
		return nil, errors.New("blob store: injected open failure")
	}
	b, ok := f.blobs[s]
	if !ok {
		return nil, fmt.Errorf("blob %s: %w", s, fs.ErrNotExist)
	}
	if f.corrupt[s] {
		b = append(bytes.Clone(b[:len(b)/2]), "CORRUPT"...)
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

func (f *fx) opt() Options { return Options{OpenBlob: f.openBlob, JournalDir: f.jdir} }

func (f *fx) delta(changes ...dryexec.FileChange) *dryexec.StateDelta {
	d := &dryexec.StateDelta{TrialID: testTrial, Files: changes}
	d.Normalize()
	return d
}

func (f *fx) hostSnap() tree    { return snapshot(f.t, f.root) }
func (f *fx) outsideSnap() tree { return snapshot(f.t, f.outside) }

// The FileChange builders mirror what fsdelta reports for each kind of change.

func (f *fx) create(p, data string, mode uint32) dryexec.FileChange {
	return dryexec.FileChange{Path: f.p(p), Op: dryexec.OpCreate, Kind: dryexec.KindFile, Mode: modeStr(mode),
		Size: int64(len(data)), SHA256: f.put(data)}
}

func (f *fx) modify(p, before string, beforeMode uint32, after string, mode uint32) dryexec.FileChange {
	return dryexec.FileChange{Path: f.p(p), Op: dryexec.OpModify, Kind: dryexec.KindFile, Mode: modeStr(mode),
		Size: int64(len(after)), SHA256: f.put(after), BeforeSHA256: sha(before), BeforeMode: modeStr(beforeMode)}
}

func (f *fx) del(p, before string, mode uint32) dryexec.FileChange {
	return dryexec.FileChange{Path: f.p(p), Op: dryexec.OpDelete, Kind: dryexec.KindFile, Mode: modeStr(mode),
		Size: int64(len(before)), BeforeSHA256: sha(before)}
}

func (f *fx) delLink(p, target string) dryexec.FileChange {
	return dryexec.FileChange{Path: f.p(p), Op: dryexec.OpDelete, Kind: dryexec.KindSymlink, Mode: "0777",
		Size: int64(len(target)), LinkTarget: target}
}

func (f *fx) chmodFile(p, data string, beforeMode, mode uint32) dryexec.FileChange {
	return dryexec.FileChange{Path: f.p(p), Op: dryexec.OpChmod, Kind: dryexec.KindFile, Mode: modeStr(mode),
		Size: int64(len(data)), SHA256: sha(data), BeforeSHA256: sha(data), BeforeMode: modeStr(beforeMode)}
}

func (f *fx) chmodDir(p string, beforeMode, mode uint32) dryexec.FileChange {
	return dryexec.FileChange{Path: f.p(p), Op: dryexec.OpChmod, Kind: dryexec.KindDir, Mode: modeStr(mode),
		BeforeMode: modeStr(beforeMode)}
}

func (f *fx) mkdir(p string, mode uint32) dryexec.FileChange {
	return dryexec.FileChange{Path: f.p(p), Op: dryexec.OpMkdir, Kind: dryexec.KindDir, Mode: modeStr(mode)}
}

func (f *fx) rmdir(p string, mode uint32) dryexec.FileChange {
	return dryexec.FileChange{Path: f.p(p), Op: dryexec.OpRmdir, Kind: dryexec.KindDir, Mode: modeStr(mode)}
}

func (f *fx) symlink(p, target string) dryexec.FileChange {
	return dryexec.FileChange{Path: f.p(p), Op: dryexec.OpSymlink, Kind: dryexec.KindSymlink, Mode: "0777",
		Size: int64(len(target)), LinkTarget: target}
}

func (f *fx) mkfifo(p string, mode uint32) dryexec.FileChange {
	return dryexec.FileChange{Path: f.p(p), Op: dryexec.OpCreate, Kind: dryexec.KindFIFO, Mode: modeStr(mode)}
}

func (f *fx) delFifo(p string, mode uint32) dryexec.FileChange {
	return dryexec.FileChange{Path: f.p(p), Op: dryexec.OpDelete, Kind: dryexec.KindFIFO, Mode: modeStr(mode)}
}

// linked puts fc in hard-link group g.
func linked(fc dryexec.FileChange, g int) dryexec.FileChange {
	fc.LinkGroup = g
	return fc
}

// at gives fc the mtime the trial left.
func at(fc dryexec.FileChange, mtimeNS int64) dryexec.FileChange {
	fc.MtimeNS = mtimeNS
	return fc
}

// chowned makes fc move the path's owner from the host's huid:hgid to uid:gid.
func chowned(fc dryexec.FileChange, huid, hgid, uid, gid int) dryexec.FileChange {
	fc.UID, fc.GID = uid, gid
	fc.SetBeforeOwner(huid, hgid)
	return fc
}

// chownLink is the lchown of the host symlink p (target), a chmod of it.
func (f *fx) chownLink(p, target string, huid, hgid, uid, gid int) dryexec.FileChange {
	return chowned(dryexec.FileChange{Path: f.p(p), Op: dryexec.OpChmod, Kind: dryexec.KindSymlink, Mode: "0777",
		BeforeMode: "0777", Size: int64(len(target)), LinkTarget: target}, huid, hgid, uid, gid)
}

func owned(fc dryexec.FileChange, uid, gid int) dryexec.FileChange {
	fc.UID, fc.GID = uid, gid
	return fc
}
