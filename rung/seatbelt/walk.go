//go:build linux || darwin

package seatbelt

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/wire"
)

// fileStat is what the clone walk compares of one path: its identity
// (inode), what a write moves (size, mtime, and ctime, which no call sets
// back) and what the delta reports (mode, owner, links).
type fileStat struct {
	mode     uint32 // st_mode: type and permission bits
	ino      uint64
	nlink    uint64
	uid, gid int
	size     int64
	mtimeNS  int64
	ctimeNS  int64
}

func (s fileStat) kind() uint32 { return s.mode & unix.S_IFMT }

// lstat reads p's fileStat without following a symlink. x/sys names the
// fields alike on Linux and macOS; only their widths differ.
func lstat(p string) (fileStat, error) {
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		return fileStat{}, &fs.PathError{Op: "lstat", Path: p, Err: err}
	}
	return fileStat{
		mode: uint32(st.Mode), ino: uint64(st.Ino), nlink: uint64(st.Nlink), uid: int(st.Uid), gid: int(st.Gid),
		size: st.Size, mtimeNS: st.Mtim.Nano(), ctimeNS: st.Ctim.Nano(),
	}, nil
}

// snapshot is the clone as it was before the command ran: what the walk
// after it compares with, so that an untouched path costs one lstat and no
// read of the clone or of the original.
type snapshot struct {
	stats map[string]fileStat // by path relative to the clone's root ("" is the root)
	names map[string][]string // a dir's names, sorted
}

// takeSnapshot records every path beneath root. It costs a stat per path,
// like the walk after the command: O(the tree), as the clone is.
func takeSnapshot(root string) (*snapshot, error) {
	s := &snapshot{stats: map[string]fileStat{}, names: map[string][]string{}}
	var rec func(rel string) error
	rec = func(rel string) error {
		st, err := lstat(filepath.Join(root, rel))
		if err != nil {
			return err
		}
		s.stats[rel] = st
		if st.kind() != unix.S_IFDIR {
			return nil
		}
		names, err := readNames(filepath.Join(root, rel))
		if err != nil {
			return err
		}
		s.names[rel] = names
		for _, n := range names {
			if err := rec(join(rel, n)); err != nil {
				return err
			}
		}
		return nil
	}
	return s, rec("")
}

// entrySink takes the walk's entries: fsdelta.Differ's Add, which checks
// each against the host and produces the delta.
type entrySink interface {
	Add(e *wire.FSEntry, content io.Reader) error
}

// cloneWalk reports what the command changed in the clone (root) to a
// sink, as a guest reports an overlay's upper dir: pre-order, names sorted,
// every reported path's parent dir reported first, a deleted name as a
// whiteout. The sink compares each entry with the original, content
// included; the walk's part is to leave out, cheaply, what it can prove
// untouched.
//
// The fast path: a path is untouched when the snapshot holds it with the
// same inode, mode, size and mtime and its ctime has not moved since.
// Every write, chmod, chown, link, rename and utimes sets the ctime to the
// clock's now, and nothing sets it back; since is taken after the clock
// has ticked past the snapshot, so a change in the snapshot's own tick
// cannot hide. The inode catches a path whose file was replaced by another
// one of the snapshot's (mv a b) on a filesystem whose rename leaves the
// moved file's ctime alone. The mtime and size alone would not do: a
// command can write and set the mtime back (touch -r).
type cloneWalk struct {
	root  string
	snap  *snapshot
	since int64
	sink  entrySink
	// pending are the dirs above the current path not yet reported: an
	// entry's ancestors are reported just before it.
	pending []*wire.FSEntry
}

// untouched is the fast path.
func (w *cloneWalk) untouched(rel string, st fileStat) bool {
	s, ok := w.snap.stats[rel]
	return ok && s.ino == st.ino && s.mode == st.mode && s.size == st.size && s.mtimeNS == st.mtimeNS &&
		s.ctimeNS == st.ctimeNS && st.ctimeNS < w.since
}

// dir walks the clone's dir rel ("" for the root), whose stat is st.
func (w *cloneWalk) dir(rel string, st fileStat) error {
	names, err := readNames(filepath.Join(w.root, rel))
	if err != nil {
		return err
	}
	all := names
	if !w.untouched(rel, st) {
		// Its names may have changed: a name the snapshot had and the
		// clone has not was deleted (or renamed away).
		for _, n := range w.snap.names[rel] {
			if _, found := slices.BinarySearch(names, n); !found {
				all = append(all, n)
			}
		}
		all = slices.Clone(all)
		slices.Sort(all)
	}
	for _, n := range all {
		p := join(rel, n)
		if _, found := slices.BinarySearch(names, n); !found {
			if err := w.report(&wire.FSEntry{Path: p, Kind: wire.EntryWhiteout}, nil); err != nil {
				return err
			}
			continue
		}
		if err := w.entry(p); err != nil {
			return err
		}
	}
	return nil
}

// entry looks at one path of the clone.
func (w *cloneWalk) entry(p string) error {
	cp := filepath.Join(w.root, p)
	st, err := lstat(cp)
	if err != nil {
		return err
	}
	changed := !w.untouched(p, st)
	e := &wire.FSEntry{Path: p, Mode: st.mode & 0o7777, UID: st.uid, GID: st.gid, MtimeNS: st.mtimeNS}
	switch st.kind() {
	case unix.S_IFDIR:
		e.Kind = wire.EntryDir
		w.pending = append(w.pending, e)
		mark := len(w.pending)
		if changed {
			if err := w.flush(); err != nil {
				return err
			}
		}
		err := w.dir(p, st)
		if len(w.pending) >= mark {
			w.pending = w.pending[:mark-1] // nothing beneath it changed
		}
		return err
	case unix.S_IFREG:
		e.Kind, e.Size = wire.EntryFile, st.size
	case unix.S_IFLNK:
		e.Kind = wire.EntrySymlink
		if e.Link, err = os.Readlink(cp); err != nil {
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
	if st.nlink > 1 {
		e.Ino, e.Nlink = st.ino, uint32(st.nlink)
	}
	if e.Kind != wire.EntryFile {
		return w.report(e, nil)
	}
	f, err := os.OpenFile(cp, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return w.report(e, f)
}

// flush reports the pending dirs, outermost first.
func (w *cloneWalk) flush() error {
	for _, d := range w.pending {
		if err := w.sink.Add(d, nil); err != nil {
			return err
		}
	}
	w.pending = w.pending[:0]
	return nil
}

func (w *cloneWalk) report(e *wire.FSEntry, content io.Reader) error {
	if err := w.flush(); err != nil {
		return err
	}
	return w.sink.Add(e, content)
}

// walkClone reports to sink what changed beneath root since snap was taken
// and the clock at root read since (fsTick).
func walkClone(root string, snap *snapshot, since int64, sink entrySink) error {
	st, err := lstat(root)
	if err != nil {
		return err
	}
	w := &cloneWalk{root: root, snap: snap, since: since, sink: sink}
	return w.dir("", st)
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// readNames lists dir's names, sorted.
func readNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	slices.Sort(names)
	return names, err
}

// fsNow is the filesystem's clock at dir: the ctime of a file made there
// now (the clock the command's changes will be stamped with).
func fsNow(dir string) (int64, error) {
	f, err := os.CreateTemp(dir, ".now-")
	if err != nil {
		return 0, err
	}
	defer os.Remove(f.Name())
	defer f.Close()
	st, err := lstat(f.Name())
	return st.ctimeNS, err
}

// fsTick waits until the filesystem clock at dir has moved past now and
// returns its time then: a coarse clock (Linux stamps from the tick, 1–10
// ms) would otherwise give a change the command makes in the snapshot's
// tick the snapshot's own ctime. At most one tick of waiting.
func fsTick(dir string) (int64, error) {
	done, err := fsNow(dir)
	if err != nil {
		return 0, err
	}
	for {
		now, err := fsNow(dir)
		if err != nil || now > done {
			return now, err
		}
		time.Sleep(200 * time.Microsecond)
	}
}
