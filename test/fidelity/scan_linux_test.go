package fidelity

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
)

// entry is one path of a scanned tree, with everything the harness compares.
type entry struct {
	kind     dryexec.Kind
	mode     uint32 // st_mode & 07777: permissions, setuid/setgid, sticky
	uid, gid int
	size     int64
	sha      string // files: sha256 of the content
	target   string // symlinks
	mtime    int64  // ns since the epoch
	ino      uint64
	nlink    uint64
	small    []byte // the content of files up to smallFile bytes, for reports
	pyc      *pycHeader
}

// smallFile is the largest file whose content a scan keeps, so that a report
// can show the first line that differs.
const smallFile = 16 << 10

// pycHeader is a compiled Python file's header (PEP 552) and the hash of the
// code after it.
type pycHeader struct {
	flags    uint32
	srcMtime uint32 // seconds, for a timestamp pyc (flags 0)
	srcSize  uint32
	bodySHA  string
}

// tree is a scan: tree-relative path ("." is the root) → entry. Paths hold the
// exact bytes of the names, UTF-8 or not.
type tree map[string]*entry

// scan walks root without following symlinks.
func scan(root string) (tree, error) {
	t := tree{}
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		e, err := stat(p)
		if err != nil {
			return err
		}
		t[rel] = e
		return nil
	})
	return t, err
}

func stat(p string) (*entry, error) {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return nil, &os.PathError{Op: "lstat", Path: p, Err: err}
	}
	e := &entry{mode: st.Mode & 0o7777, uid: int(st.Uid), gid: int(st.Gid), size: st.Size,
		mtime: st.Mtim.Nano(), ino: st.Ino, nlink: uint64(st.Nlink)}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		e.kind = dryexec.KindFile
		if err := hashFile(p, e); err != nil {
			return nil, err
		}
	case unix.S_IFDIR:
		e.kind, e.size = dryexec.KindDir, 0
	case unix.S_IFLNK:
		e.kind = dryexec.KindSymlink
		t, err := os.Readlink(p)
		if err != nil {
			return nil, err
		}
		e.target = t
	case unix.S_IFIFO:
		e.kind = dryexec.KindFIFO
	default:
		e.kind = dryexec.KindOther
	}
	return e, nil
}

func hashFile(p string, e *entry) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	h := sha256.New()
	var head bytes.Buffer
	w := io.MultiWriter(h, &limitedBuffer{&head, smallFile + 1})
	pyc := strings.HasSuffix(p, ".pyc")
	var body hash.Hash
	if pyc {
		// The code after a pyc's 16-byte header, hashed on its own.
		body = sha256.New()
		w = io.MultiWriter(w, &skipWriter{body, 16})
	}
	if _, err := io.Copy(w, f); err != nil {
		return err
	}
	e.sha = hex.EncodeToString(h.Sum(nil))
	if head.Len() <= smallFile {
		e.small = head.Bytes()
	}
	if b := head.Bytes(); pyc && len(b) >= 16 {
		e.pyc = &pycHeader{flags: binary.LittleEndian.Uint32(b[4:8]),
			srcMtime: binary.LittleEndian.Uint32(b[8:12]), srcSize: binary.LittleEndian.Uint32(b[12:16]),
			bodySHA: hex.EncodeToString(body.Sum(nil))}
	}
	return nil
}

// skipWriter passes on what is written to it after the first n bytes.
type skipWriter struct {
	w io.Writer
	n int
}

func (s *skipWriter) Write(p []byte) (int, error) {
	k := min(s.n, len(p))
	s.n -= k
	if _, err := s.w.Write(p[k:]); err != nil {
		return 0, err
	}
	return len(p), nil
}

// limitedBuffer keeps the first n bytes written to it and swallows the rest.
type limitedBuffer struct {
	b *bytes.Buffer
	n int
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	if room := l.n - l.b.Len(); room > 0 {
		l.b.Write(p[:min(room, len(p))])
	}
	return len(p), nil
}

// linkGroups maps each path that shares its inode with another path of t to
// the sorted list of all of them.
func (t tree) linkGroups(skip func(string) bool) map[string][]string {
	byIno := map[uint64][]string{}
	for p, e := range t {
		if e.kind != dryexec.KindDir && e.nlink > 1 && !skip(p) {
			byIno[e.ino] = append(byIno[e.ino], p)
		}
	}
	out := map[string][]string{}
	for _, ps := range byIno {
		if len(ps) < 2 {
			continue
		}
		sort.Strings(ps)
		for _, p := range ps {
			out[p] = ps
		}
	}
	return out
}

// pycSource is the source file a compiled file stands for, or "".
func pycSource(p string) string {
	dir, base := filepath.Split(p)
	if filepath.Base(dir) == "__pycache__" {
		// name.cpython-311[.opt-1].pyc → ../name.py
		name, _, ok := strings.Cut(base, ".")
		if !ok {
			return ""
		}
		return filepath.Join(filepath.Dir(filepath.Clean(dir)), name+".py")
	}
	return strings.TrimSuffix(p, ".pyc") + ".py" // compileall -b
}

// pycStale says why the timestamp pyc at p is not valid for its source in t
// (Python would recompile it), or "".
func (t tree) pycStale(p string) string {
	e := t[p]
	if e == nil || e.pyc == nil || e.pyc.flags != 0 {
		return ""
	}
	src := t[pycSource(p)]
	if src == nil {
		return ""
	}
	if m := uint32(src.mtime / int64(time.Second)); m != e.pyc.srcMtime || uint32(src.size) != e.pyc.srcSize {
		return fmt.Sprintf("records source mtime %d size %d, the source has %d, %d", e.pyc.srcMtime, e.pyc.srcSize, m, src.size)
	}
	return ""
}

// describe is a short account of e for reports.
func describe(e *entry) string {
	if e == nil {
		return "absent"
	}
	switch e.kind {
	case dryexec.KindFile:
		return fmt.Sprintf("file %04o %d bytes sha %.12s", e.mode, e.size, e.sha)
	case dryexec.KindSymlink:
		return fmt.Sprintf("symlink → %s", dryexec.QuotePath(e.target))
	default:
		return fmt.Sprintf("%s %04o", e.kind, e.mode)
	}
}

// firstDifference shows the first line where two small contents differ.
func firstDifference(a, b []byte) string {
	if a == nil || b == nil {
		return ""
	}
	al, bl := bytes.Split(a, []byte("\n")), bytes.Split(b, []byte("\n"))
	for i := 0; i < max(len(al), len(bl)); i++ {
		var x, y []byte
		if i < len(al) {
			x = al[i]
		}
		if i < len(bl) {
			y = bl[i]
		}
		if !bytes.Equal(x, y) {
			return fmt.Sprintf("line %d: %q vs %q", i+1, clip(x), clip(y))
		}
	}
	return ""
}

func clip(b []byte) []byte {
	if len(b) > 100 {
		return append(append([]byte{}, b[:100]...), "…"...)
	}
	return b
}
