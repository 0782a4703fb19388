package fsdelta

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/fswalk"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/wire"
)

func TestMain(m *testing.M) {
	// Modes in the cases are written as the files are created: make them
	// independent of the caller's umask.
	unix.Umask(0o022)
	testreq.OwnMountNamespace()
	os.Exit(m.Run())
}

func sha(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// node is one thing in a test tree. Parents must come before their children.
type node struct {
	path    string
	kind    byte // 'f' file, 'd' dir, 'l' symlink
	content string
	mode    os.FileMode // permission bits incl. setuid etc. (unix form, 07777)
	link    string
	chown   bool // owned by uid:gid, not by the test's user
	uid     int
	gid     int
}

// ownedBy returns n owned by uid:gid (set with lchown, so the test needs root).
func ownedBy(uid, gid int, n node) node {
	n.chown, n.uid, n.gid = true, uid, gid
	return n
}

func file(p, content string, mode os.FileMode) node {
	return node{path: p, kind: 'f', content: content, mode: mode}
}
func dir(p string, mode os.FileMode) node  { return node{path: p, kind: 'd', mode: mode} }
func link(p, target string) node           { return node{path: p, kind: 'l', link: target} }
func fifo(p string, mode os.FileMode) node { return node{path: p, kind: 'p', mode: mode} }

// hardlink is p, a hard link to the earlier node of path to.
func hardlink(p, to string) node { return node{path: p, kind: 'h', link: to} }

func buildTree(t testing.TB, root string, nodes []node) {
	t.Helper()
	for _, n := range nodes {
		p := filepath.Join(root, n.path)
		switch n.kind {
		case 'f':
			must(t, os.WriteFile(p, []byte(n.content), 0o600))
			must(t, unix.Chmod(p, uint32(n.mode)))
		case 'd':
			must(t, os.Mkdir(p, 0o700))
			must(t, unix.Chmod(p, uint32(n.mode)))
		case 'l':
			must(t, os.Symlink(n.link, p))
		case 'p':
			must(t, unix.Mkfifo(p, 0o600))
			must(t, unix.Chmod(p, uint32(n.mode)))
		case 'h':
			must(t, os.Link(filepath.Join(root, n.link), p))
			continue
		default:
			t.Fatalf("bad node kind %q", n.kind)
		}
		if n.chown {
			must(t, os.Lchown(p, n.uid, n.gid))
			if n.kind != 'l' {
				must(t, unix.Chmod(p, uint32(n.mode))) // chown clears setuid/setgid
			}
		}
	}
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// snapshot describes every path below root (not following symlinks): kind, mode,
// size, mtime, ctime, content hash and link target. Comparing two snapshots tells
// whether anything below root was changed.
func snapshot(t testing.TB, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		desc := fmt.Sprintf("mode=%o size=%d mtime=%d.%d ctime=%d.%d", st.Mode, st.Size,
			st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += " sha=" + sha(string(b))
		case unix.S_IFLNK:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			desc += " link=" + l
		}
		out[p] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func checkSameSnapshot(t testing.TB, what string, before, after map[string]string) {
	t.Helper()
	for p, b := range before {
		if a, ok := after[p]; !ok {
			t.Errorf("%s: %s disappeared", what, p)
		} else if a != b {
			t.Errorf("%s: %s changed: %s -> %s", what, p, b, a)
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			t.Errorf("%s: %s appeared", what, p)
		}
	}
}

// rootOrSkip skips a test that needs root.
func rootOrSkip(t testing.TB) {
	t.Helper()
	testreq.NeedRoot(t)
}

// tempDir is t.TempDir without the test's name in the path: overlay's mount
// options are comma-separated, and test names hold commas.
func tempDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "fsdelta-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// overlay is one overlayfs mount made for a test.
type overlay struct {
	lower, upper, work, merged string
	mounted                    bool
}

// mountOverlay mounts an overlay of lower in fresh temp dirs, with extra options
// (comma-separated, may be empty). It skips the test when mounting is not allowed.
func mountOverlay(t testing.TB, lower, extra string) *overlay {
	t.Helper()
	rootOrSkip(t)
	base := tempDir(t)
	o := &overlay{lower: lower, upper: base + "/upper", work: base + "/work", merged: base + "/merged"}
	for _, d := range []string{o.upper, o.work, o.merged} {
		must(t, os.Mkdir(d, 0o755))
	}
	opts := "lowerdir=" + lower + ",upperdir=" + o.upper + ",workdir=" + o.work
	if extra != "" {
		opts += "," + extra
	}
	if err := unix.Mount("overlay", o.merged, "overlay", 0, opts); err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.ENODEV) {
			testreq.Needf(t, testreq.Kernel, "overlayfs mount", err)
		}
		t.Fatalf("mount overlay %s: %v", opts, err)
	}
	o.mounted = true
	t.Cleanup(o.unmount)
	return o
}

func (o *overlay) unmount() {
	if o.mounted {
		unix.Unmount(o.merged, unix.MNT_DETACH)
		o.mounted = false
	}
}

// diffUpper walks the upper dir (of an overlay mounted with userxattr or not) and
// feeds every entry to a fresh Differ for lower.
func diffUpper(t testing.TB, upper, lower string, userXattr bool, diffMax int64) []dryexec.FileChange {
	t.Helper()
	got, _ := diffUpperOpts(t, upper, lower, fswalk.WalkOptions{UserXattr: userXattr}, diffMax)
	return got
}

// memBlobs is a BlobSink in memory: content by sha256.
type memBlobs map[string][]byte

func (m memBlobs) PutBlob(r io.Reader) (string, int64, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return "", 0, err
	}
	s := sha(string(b))
	m[s] = b
	return s, int64(len(b)), nil
}

// diffUpperOpts is diffUpper for an overlay mounted as o says; it also returns
// the contents the Differ kept. Every entry crosses the wire form (JSON), as
// between guest and host.
func diffUpperOpts(t testing.TB, upper, lower string, o fswalk.WalkOptions, diffMax int64) ([]dryexec.FileChange, memBlobs) {
	t.Helper()
	got, _, blobs := diffUpperAll(t, upper, lower, o, diffMax)
	return got, blobs
}

// diffUpperAll is diffUpperOpts that also returns the touched paths.
func diffUpperAll(t testing.TB, upper, lower string, o fswalk.WalkOptions, diffMax int64) ([]dryexec.FileChange, []dryexec.FileChange, memBlobs) {
	t.Helper()
	changes, touched, blobs := diffUpperSpill(t, upper, lower, o, diffMax, "")
	// The same walk again, every change spilled to a file from the first
	// (SpillTo) and the host read through the portable walk (darwin's, not
	// openat2): the delta read back must be the same, change for change.
	spilled, spilledTouched, _ := diffUpperSpill(t, upper, lower, o, diffMax, t.TempDir())
	if !reflect.DeepEqual(changes, spilled) {
		t.Fatalf("spilled changes (host read through walkHostFS) differ from the in-memory ones (openat2):\nmemory:\n%s\nspilled:\n%s", showChanges(lower, changes), showChanges(lower, spilled))
	}
	if !reflect.DeepEqual(touched, spilledTouched) {
		t.Fatalf("touched differ when spilled (walkHostFS):\nmemory:\n%s\nspilled:\n%s", showChanges(lower, touched), showChanges(lower, spilledTouched))
	}
	return changes, touched, blobs
}

// diffUpperSpill is diffUpperAll's one run: in memory, or with the Differ
// spilling to spillDir from its first change.
func diffUpperSpill(t testing.TB, upper, lower string, o fswalk.WalkOptions, diffMax int64, spillDir string) ([]dryexec.FileChange, []dryexec.FileChange, memBlobs) {
	t.Helper()
	blobs := memBlobs{}
	d := NewDiffer([]Mount{{Path: lower}}, blobs, diffMax)
	defer d.Close()
	if spillDir != "" {
		d.SpillTo(spillDir, 1)
		d.host = walkHostFS{}
	}
	err := fswalk.Walk(upper, 0, o, func(e *wire.FSEntry, content *os.File) error {
		var r io.Reader
		if content != nil {
			r = content
		}
		b, err := json.Marshal(e)
		if err != nil {
			return err
		}
		var we wire.FSEntry
		if err := json.Unmarshal(b, &we); err != nil {
			return err
		}
		return d.Add(&we, r)
	})
	if err != nil {
		t.Fatalf("walk+add: %v", err)
	}
	var sd dryexec.StateDelta
	if err := d.FinishDelta(&sd); err != nil {
		t.Fatalf("finish: %v", err)
	}
	if spillDir != "" && sd.NumFiles() > 0 && !sd.Spilled() {
		t.Fatalf("SpillTo(dir, 1): %d changes not spilled", sd.NumFiles())
	}
	if spillDir != "" {
		// Unlinked at once: nothing is left in the dir, even before exit.
		if ents, _ := os.ReadDir(spillDir); len(ents) != 0 {
			t.Fatalf("the spill dir holds %d entries", len(ents))
		}
	}
	if err := sd.LoadFiles(); err != nil {
		t.Fatalf("reading the spilled changes: %v", err)
	}
	if !reflect.DeepEqual(sd.Touched, d.Touched()) {
		t.Fatalf("FinishDelta's touched differ from Touched()")
	}
	return sd.Files, sd.Touched, blobs
}

// wc is one expected change, path relative to the lower dir.
type wc struct {
	path       string
	op         dryexec.Op
	kind       dryexec.Kind
	mode       string
	beforeMode string
	content    *string // new content of a file (sha256, size)
	before     *string // host content of a file (before_sha256; size for delete)
	link       string
	size       int64    // for kinds other than files and symlinks
	diffHas    []string // the diff must hold each; nil: the diff must be empty
	owned      bool     // uid:gid below own the path, not the test's user
	uid, gid   int
	hostOwner  *[2]int // the host's owner (before_uid, before_gid) of a chown
}

// by returns w with the path owned by uid:gid (after the change; before it, for
// delete and rmdir).
func (w wc) by(uid, gid int) wc {
	w.owned, w.uid, w.gid = true, uid, gid
	return w
}

// from returns w as also moving the path's owner from the host's uid:gid.
func (w wc) from(uid, gid int) wc {
	w.hostOwner = &[2]int{uid, gid}
	return w
}

func str(s string) *string { return &s }

func wCreate(p, content, mode string, diffHas ...string) wc {
	return wc{path: p, op: dryexec.OpCreate, kind: dryexec.KindFile, mode: mode, content: str(content), diffHas: diffHas}
}
func wModify(p, before, content, beforeMode, mode string, diffHas ...string) wc {
	return wc{path: p, op: dryexec.OpModify, kind: dryexec.KindFile, mode: mode, beforeMode: beforeMode,
		content: str(content), before: str(before), diffHas: diffHas}
}
func wChmod(p, content, beforeMode, mode string) wc {
	return wc{path: p, op: dryexec.OpChmod, kind: dryexec.KindFile, mode: mode, beforeMode: beforeMode,
		content: str(content), before: str(content)}
}
func wDelete(p, before, mode string) wc {
	return wc{path: p, op: dryexec.OpDelete, kind: dryexec.KindFile, mode: mode, before: str(before)}
}
func wDeleteLink(p, target string) wc {
	return wc{path: p, op: dryexec.OpDelete, kind: dryexec.KindSymlink, mode: "0777", link: target}
}
func wMkdir(p, mode string) wc {
	return wc{path: p, op: dryexec.OpMkdir, kind: dryexec.KindDir, mode: mode}
}
func wRmdir(p, mode string) wc {
	return wc{path: p, op: dryexec.OpRmdir, kind: dryexec.KindDir, mode: mode}
}
func wChmodDir(p, beforeMode, mode string) wc {
	return wc{path: p, op: dryexec.OpChmod, kind: dryexec.KindDir, mode: mode, beforeMode: beforeMode}
}
func wSymlink(p, target string) wc {
	return wc{path: p, op: dryexec.OpSymlink, kind: dryexec.KindSymlink, mode: "0777", link: target}
}

// expected turns w into the FileChange the Differ must produce (Diff aside).
func (w wc) expected(lower string) dryexec.FileChange {
	fc := dryexec.FileChange{Path: lower + "/" + w.path, Op: w.op, Kind: w.kind, Mode: w.mode,
		BeforeMode: w.beforeMode, LinkTarget: w.link, Size: w.size, UID: os.Geteuid(), GID: os.Getegid()}
	if w.owned {
		fc.UID, fc.GID = w.uid, w.gid
	}
	if w.kind == dryexec.KindSymlink {
		fc.Size = int64(len(w.link))
	}
	if w.hostOwner != nil {
		fc.SetBeforeOwner(w.hostOwner[0], w.hostOwner[1])
	}
	if w.content != nil {
		fc.SHA256, fc.Size = sha(*w.content), int64(len(*w.content))
	}
	if w.before != nil {
		fc.BeforeSHA256 = sha(*w.before)
		if w.op == dryexec.OpDelete {
			fc.Size = int64(len(*w.before))
		}
	}
	return fc
}

func showChanges(lower string, cs []dryexec.FileChange) string {
	var b strings.Builder
	for _, c := range cs {
		fmt.Fprintf(&b, "\n\t%-7s %-7s %s %d:%d %s", c.Op, c.Kind, c.Mode, c.UID, c.GID, dryexec.QuotePath(strings.TrimPrefix(c.Path, lower+"/")))
		if c.BeforeUID != nil && c.BeforeGID != nil {
			fmt.Fprintf(&b, " from %d:%d", *c.BeforeUID, *c.BeforeGID)
		}
		if c.LinkGroup != 0 {
			fmt.Fprintf(&b, " link_group=%d", c.LinkGroup)
		}
	}
	return b.String()
}

// checkChanges asserts that got is exactly want, in order.
func checkChanges(t testing.TB, lower string, got []dryexec.FileChange, want []wc) {
	t.Helper()
	if len(got) != len(want) {
		exp := make([]dryexec.FileChange, len(want))
		for i, w := range want {
			exp[i] = w.expected(lower)
		}
		t.Fatalf("got %d changes:%s\nwant %d:%s", len(got), showChanges(lower, got), len(want), showChanges(lower, exp))
	}
	for i, w := range want {
		g, e := got[i], w.expected(lower)
		diff := g.Diff
		// Times and link groups are checked against the merged view
		// (checkMtimes, the nlink in contentTree).
		g.Diff, g.MtimeNS, g.LinkGroup = "", 0, 0
		if !reflect.DeepEqual(g, e) {
			t.Errorf("change %d:\n got %+v\nwant %+v\nall:%s", i, g, e, showChanges(lower, got))
			continue
		}
		if w.diffHas == nil && diff != "" {
			t.Errorf("change %d (%s %s): want no diff, got:\n%s", i, w.op, w.path, diff)
		}
		for _, s := range w.diffHas {
			if !strings.Contains(diff, s) {
				t.Errorf("change %d (%s %s): diff lacks %q:\n%s", i, w.op, w.path, s, diff)
			}
		}
	}
}
