//go:build linux || darwin

package fswalk

import (
	"io"
	"io/fs"
	"os"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/wire"
)

// Stat is what a tree walk compares of one path: its identity (inode), what
// a write moves (size, mtime, and ctime, which no call sets back) and what
// the delta reports (mode, owner, links).
type Stat struct {
	Mode     uint32 // st_mode: type and permission bits
	Ino      uint64
	Nlink    uint64
	UID, GID int
	Size     int64
	MtimeNS  int64
	CtimeNS  int64
}

// Kind is the type bits of the mode (unix.S_IFMT).
func (s Stat) Kind() uint32 { return s.Mode & unix.S_IFMT }

// Lstat reads p's Stat without following a symlink. x/sys names the fields
// alike on Linux and macOS; only their widths differ.
func Lstat(p string) (Stat, error) {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return Stat{}, &fs.PathError{Op: "lstat", Path: p, Err: err}
	}
	return Stat{
		Mode: uint32(st.Mode), Ino: uint64(st.Ino), Nlink: uint64(st.Nlink), UID: int(st.Uid), GID: int(st.Gid),
		Size: st.Size, MtimeNS: st.Mtim.Nano(), CtimeNS: st.Ctim.Nano(),
	}, nil
}

// Baseline is what a tree walk knows of the tree before the command ran:
// the host rung's original (its copy's source), the seatbelt rung's
// snapshot of its clone.
type Baseline interface {
	// Changed says whether rel (st: its stat now) may differ from the
	// baseline (false only when it provably does not), and whether the
	// baseline had a dir there whose names can be compared (when it had
	// not, everything beneath rel is new).
	Changed(rel string, st Stat) (changed, hadDir bool)
	// Names are the baseline's names in dir rel, sorted; a name it has and
	// the tree has not is reported deleted.
	Names(rel string) ([]string, error)
	// Skip says rel is not the baseline's as the tree has it (left out of
	// a copy): never reported deleted, never looked beneath.
	Skip(rel string) bool
}

// WalkTree reports what changed in the plain dir tree at root since b to
// add, as a guest reports an overlay's upper dir (Walk): pre-order, names
// sorted, every reported path's parent dir reported first, a deleted name
// as a whiteout; a file with its content. add (fsdelta's Differ) compares
// each entry with the host; the walk's part is to leave out, cheaply, what
// b proves untouched, and to list a dir against b's names only when the
// dir itself changed.
func WalkTree(root string, b Baseline, add func(e *wire.FSEntry, content io.Reader) error) error {
	st, err := Lstat(root)
	if err != nil {
		return err
	}
	w := &treeWalk{root: root, b: b, add: add}
	changed, hadDir := b.Changed("", st)
	return w.dir("", changed && hadDir, !hadDir)
}

type treeWalk struct {
	root string
	b    Baseline
	add  func(e *wire.FSEntry, content io.Reader) error
	// pending are the dirs above the current path not yet reported: an
	// entry's ancestors are reported just before it.
	pending []*wire.FSEntry
}

// dir walks the tree's dir rel ("" for the root): list says its names may
// have changed (compare them with the baseline's), fresh that everything
// beneath it is new.
func (w *treeWalk) dir(rel string, list, fresh bool) error {
	names, err := ReadNames(w.path(rel))
	if err != nil {
		return err
	}
	all := names
	if list && !fresh {
		// A name of the baseline's gone from the tree was deleted (or
		// renamed away).
		was, err := w.b.Names(rel)
		if err != nil {
			return err
		}
		for _, n := range was {
			if _, found := slices.BinarySearch(names, n); !found && !w.b.Skip(Join(rel, n)) {
				all = append(all, n)
			}
		}
		all = slices.Clone(all)
		slices.Sort(all)
	}
	for _, n := range all {
		p := Join(rel, n)
		if _, found := slices.BinarySearch(names, n); !found {
			if err := w.report(&wire.FSEntry{Path: p, Kind: wire.EntryWhiteout}, nil); err != nil {
				return err
			}
			continue
		}
		if err := w.entry(p, fresh); err != nil {
			return err
		}
	}
	return nil
}

// entry looks at one path of the tree; fresh: its parent is new.
func (w *treeWalk) entry(p string, fresh bool) error {
	tp := w.path(p)
	st, err := Lstat(tp)
	if err != nil {
		return err
	}
	changed, hadDir := true, false
	if !fresh {
		changed, hadDir = w.b.Changed(p, st)
	}
	e := &wire.FSEntry{Path: p, Mode: st.Mode & 0o7777, UID: st.UID, GID: st.GID, MtimeNS: st.MtimeNS}
	switch st.Kind() {
	case unix.S_IFDIR:
		e.Kind = wire.EntryDir
		if w.b.Skip(p) {
			return nil
		}
		w.pending = append(w.pending, e)
		mark := len(w.pending)
		if changed {
			if err := w.flush(); err != nil {
				return err
			}
		}
		err := w.dir(p, changed, fresh || !hadDir)
		if len(w.pending) >= mark {
			w.pending = w.pending[:mark-1] // nothing beneath it changed
		}
		return err
	case unix.S_IFREG:
		e.Kind, e.Size = wire.EntryFile, st.Size
	case unix.S_IFLNK:
		e.Kind = wire.EntrySymlink
		if e.Link, err = os.Readlink(tp); err != nil {
			return err
		}
	case unix.S_IFIFO:
		e.Kind = wire.EntryFIFO
	default:
		e.Kind = wire.EntryOther
	}
	if !changed {
		return nil
	}
	if st.Nlink > 1 {
		e.Ino, e.Nlink = st.Ino, uint32(st.Nlink)
	}
	if e.Kind != wire.EntryFile {
		return w.report(e, nil)
	}
	f, err := os.OpenFile(tp, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return w.report(e, f)
}

func (w *treeWalk) path(rel string) string {
	if rel == "" {
		return w.root
	}
	return w.root + "/" + rel
}

// flush reports the pending dirs, outermost first.
func (w *treeWalk) flush() error {
	for _, d := range w.pending {
		if err := w.add(d, nil); err != nil {
			return err
		}
	}
	w.pending = w.pending[:0]
	return nil
}

func (w *treeWalk) report(e *wire.FSEntry, content io.Reader) error {
	if err := w.flush(); err != nil {
		return err
	}
	return w.add(e, content)
}

// Join is dir/name for slash-separated relative paths ("" is the root).
func Join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// ReadNames lists dir's names, sorted.
func ReadNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	slices.Sort(names)
	return names, err
}

// FSNow is the filesystem's clock at dir: the ctime of a file made there
// now. (The kernel stamps ctimes from a coarse clock: read back, it is the
// same clock a command's changes will be stamped with.)
func FSNow(dir string) (int64, error) {
	f, err := os.CreateTemp(dir, ".now-")
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	st, err := Lstat(f.Name())
	return st.CtimeNS, err
}

// FSTick waits until the filesystem clock at dir has moved past now and
// returns its time then. A coarse clock (Linux stamps from the tick, 1–10
// ms) would otherwise give a change a command makes in this tick the ctime
// of what was made just before it (a copy's last file, a hard link the
// copy made, a snapshot's own tick), which a walk comparing ctimes could
// not tell apart. At most one tick of waiting.
func FSTick(dir string) (int64, error) {
	done, err := FSNow(dir)
	if err != nil {
		return 0, err
	}
	for {
		now, err := FSNow(dir)
		if err != nil || now > done {
			return now, err
		}
		time.Sleep(200 * time.Microsecond)
	}
}
