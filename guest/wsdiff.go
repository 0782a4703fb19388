package guest

import (
	"bytes"
	"errors"
	"io"
	"io/fs"
	"maps"
	"os"
	"path"
	"slices"
	"strings"
	"syscall"

	"github.com/dryexec/dryexec/wire"
)

// wsDiffer compares the workspace as it is (cur) with its baseline (base), over a
// set of candidate paths: every path for a scan, only what the overlay's upper
// holds for overlay staging. The comparison itself is the same for both, so both
// stagings report the same diff for the same changes.
//
// Both trees are read through roots (os.Root): every name beneath the fds
// they were opened as, so that a symlink in the workspace, or one swapped
// in for a dir while the diff runs, never has the guest read outside it.
type wsDiffer struct {
	cur, base *os.Root
	// open are the dirs children is listing, by path, each side opened
	// beneath its parent's (nil where the side has no such dir): a name in
	// one is looked up with one call on its fd, not from the top.
	open map[string][2]*os.Root
	// scan: compare every child of every directory. Otherwise (overlay) the
	// candidates are what the upper holds, and a directory's children are only
	// compared in full where the host side cannot show through: it is opaque,
	// new, or replaced something that was not a directory.
	scan   bool
	opaque map[string]bool
	// unchanged, when set, says a regular file is the same as in the baseline
	// without reading it (scan staging's stat index).
	unchanged func(rel string, fi fs.FileInfo) bool
	diff      wire.Diff
	done      map[string]bool
}

func newWSDiffer(cur, base *os.Root, scan bool) *wsDiffer {
	return &wsDiffer{cur: cur, base: base, scan: scan, done: map[string]bool{}, opaque: map[string]bool{}, open: map[string][2]*os.Root{},
		diff: wire.Diff{Writes: []wire.DiffWrite{}, Deletes: []string{}, Modes: []wire.DiffMode{}}}
}

// at is where to look rel up on side 0 (cur) or 1 (base): its dir's root,
// when children has it open, and rel's last name; else the tree's root and
// rel. A nil root: the side has no such dir, so nothing is there.
func (w *wsDiffer) at(side int, rel string) (*os.Root, string) {
	dir, name := path.Split(rel)
	if d, ok := w.open[strings.TrimSuffix(dir, "/")]; ok {
		return d[side], name
	}
	return [2]*os.Root{w.cur, w.base}[side], rel
}

func (w *wsDiffer) lstat(side int, rel string) (fs.FileInfo, error) {
	r, name := w.at(side, rel)
	if r == nil {
		return nil, fs.ErrNotExist
	}
	return r.Lstat(name)
}

func (w *wsDiffer) readlink(side int, rel string) (string, error) {
	r, name := w.at(side, rel)
	if r == nil {
		return "", fs.ErrNotExist
	}
	return r.Readlink(name)
}

// diffMode is what a session reports of a mode: permission bits with the exec
// bits kept and setuid/setgid/sticky stripped.
func diffMode(m fs.FileMode) uint32 { return uint32(m.Perm()) }

// path compares one relative path, and for a directory that exists on one side
// only, everything beneath it.
func (w *wsDiffer) path(rel string) error {
	if w.done[rel] {
		return nil
	}
	w.done[rel] = true
	ci, cerr := w.lstat(0, rel)
	bi, berr := w.lstat(1, rel)
	// A parent that is a file on one side (ENOTDIR) means the path is absent there.
	if cerr != nil && !errors.Is(cerr, fs.ErrNotExist) && !errors.Is(cerr, syscall.ENOTDIR) {
		return cerr
	}
	if berr != nil && !errors.Is(berr, fs.ErrNotExist) && !errors.Is(berr, syscall.ENOTDIR) {
		return berr
	}
	cur, base := cerr == nil, berr == nil
	switch {
	case !cur && !base:
		return nil
	case !cur:
		return w.deleted(rel, bi)
	case ci.IsDir():
		if base && !bi.IsDir() {
			w.diff.Deletes = append(w.diff.Deletes, rel)
		}
		// A directory is reported through what it holds; compare its children
		// on both sides where the candidates alone would miss some.
		if w.scan || w.opaque[rel] || !base || !bi.IsDir() {
			return w.children(rel)
		}
		return nil
	case base && bi.IsDir():
		if err := w.deleted(rel, bi); err != nil {
			return err
		}
		return w.written(rel, ci)
	case !base:
		return w.written(rel, ci)
	}
	// Both are non-directories.
	if ci.Mode().Type() != bi.Mode().Type() {
		// A file became a symlink, or the reverse: the old thing is gone
		// and a new one is there. Reported as both, as a directory that
		// became a file is, so that a diff applied elsewhere removes the
		// old kind before making the new one.
		w.diff.Deletes = append(w.diff.Deletes, rel)
		return w.written(rel, ci)
	}
	if ci.Mode()&fs.ModeSymlink != 0 {
		cl, _ := w.readlink(0, rel)
		bl, _ := w.readlink(1, rel)
		if cl != bl {
			return w.written(rel, ci)
		}
		return nil
	}
	if w.unchanged != nil && w.unchanged(rel, ci) && diffMode(ci.Mode()) == diffMode(bi.Mode()) {
		return nil
	}
	ca, cn := w.at(0, rel)
	ba, bn := w.at(1, rel)
	same, err := sameContent(ca, cn, ba, bn, ci, bi)
	if err != nil {
		return err
	}
	switch {
	case !same:
		return w.written(rel, ci)
	case diffMode(ci.Mode()) != diffMode(bi.Mode()):
		w.diff.Modes = append(w.diff.Modes, wire.DiffMode{Path: rel, Mode: diffMode(ci.Mode())})
	}
	return nil
}

func (w *wsDiffer) children(rel string) error {
	names := map[string]bool{}
	var dirs [2]*os.Root
	for side := range dirs {
		if rel == "" {
			dirs[side] = [2]*os.Root{w.cur, w.base}[side]
		} else if r, name := w.at(side, rel); r != nil {
			if d, err := r.OpenRoot(name); err == nil {
				defer d.Close()
				dirs[side] = d
			}
		}
		if dirs[side] == nil {
			continue // absent or not a dir: no children
		}
		ents, _ := fs.ReadDir(dirs[side].FS(), ".")
		for _, e := range ents {
			names[e.Name()] = true
		}
	}
	w.open[rel] = dirs
	defer delete(w.open, rel)
	for _, n := range slices.Sorted(maps.Keys(names)) {
		if err := w.path(join(rel, n)); err != nil {
			return err
		}
	}
	return nil
}

func (w *wsDiffer) written(rel string, info fs.FileInfo) error {
	dw := wire.DiffWrite{Path: rel, Mode: diffMode(info.Mode())}
	switch {
	case info.Mode()&fs.ModeSymlink != 0:
		l, err := w.readlink(0, rel)
		if err != nil {
			return err
		}
		dw.Link = l
	case info.Mode().IsRegular():
		dw.Size = info.Size()
	default:
		return nil // fifos, sockets, devices are not workspace content
	}
	w.diff.Writes = append(w.diff.Writes, dw)
	return nil
}

// deleted lists rel, or every file beneath it when it was a directory.
func (w *wsDiffer) deleted(rel string, info fs.FileInfo) error {
	if !info.IsDir() {
		w.diff.Deletes = append(w.diff.Deletes, rel)
		return nil
	}
	return fs.WalkDir(w.base.FS(), rel, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		w.diff.Deletes = append(w.diff.Deletes, p)
		return nil
	})
}

func (w *wsDiffer) result() *wire.Diff {
	slices.SortFunc(w.diff.Writes, func(a, b wire.DiffWrite) int { return strings.Compare(a.Path, b.Path) })
	slices.Sort(w.diff.Deletes)
	w.diff.Deletes = slices.Compact(w.diff.Deletes)
	slices.SortFunc(w.diff.Modes, func(a, b wire.DiffMode) int { return strings.Compare(a.Path, b.Path) })
	return &w.diff
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// sameContent compares two regular files, the name a of the dir ad and b of
// bd, byte for byte (sizes first).
func sameContent(ad *os.Root, a string, bd *os.Root, b string, ai, bi fs.FileInfo) (bool, error) {
	if !ai.Mode().IsRegular() || !bi.Mode().IsRegular() || ai.Size() != bi.Size() {
		return false, nil
	}
	fa, err := ad.OpenFile(a, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false, err
	}
	defer fa.Close()
	fb, err := bd.OpenFile(b, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return false, err
	}
	defer fb.Close()
	ba, bb := make([]byte, 64<<10), make([]byte, 64<<10)
	for {
		na, erra := io.ReadFull(fa, ba)
		nb, errb := io.ReadFull(fb, bb)
		if na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return false, nil
		}
		if erra == io.EOF || erra == io.ErrUnexpectedEOF {
			return errb == io.EOF || errb == io.ErrUnexpectedEOF, nil
		}
		if erra != nil {
			return false, erra
		}
		if errb != nil {
			return false, errb
		}
	}
}
