//go:build linux || darwin

package seatbelt

import (
	"io"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/fswalk"
	"github.com/dryexec/dryexec/wire"
)

// snapshot is the clone as it was before the command ran: the baseline the
// walk after it compares with (fswalk.WalkTree), so that an untouched path
// costs one lstat and no read of the clone or of the original.
type snapshot struct {
	stats map[string]fswalk.Stat // by path relative to the clone's root ("" is the root)
	names map[string][]string    // a dir's names, sorted
	// since is the filesystem clock read after the snapshot (fswalk.FSTick):
	// a change the command makes has a ctime from it on.
	since int64
}

// takeSnapshot records every path beneath root. It costs a stat per path,
// like the walk after the command: O(the tree), as the clone is.
func takeSnapshot(root string) (*snapshot, error) {
	s := &snapshot{stats: map[string]fswalk.Stat{}, names: map[string][]string{}}
	var rec func(rel string) error
	rec = func(rel string) error {
		st, err := fswalk.Lstat(filepath.Join(root, rel))
		if err != nil {
			return err
		}
		s.stats[rel] = st
		if st.Kind() != unix.S_IFDIR {
			return nil
		}
		names, err := fswalk.ReadNames(filepath.Join(root, rel))
		if err != nil {
			return err
		}
		s.names[rel] = names
		for _, n := range names {
			if err := rec(fswalk.Join(rel, n)); err != nil {
				return err
			}
		}
		return nil
	}
	return s, rec("")
}

// Changed is the fast path: a path is untouched when the snapshot holds it
// with the same inode, mode, size and mtime and its ctime has not moved
// since. Every write, chmod, chown, link, rename and utimes sets the ctime
// to the clock's now, and nothing sets it back; since is taken after the
// clock has ticked past the snapshot, so a change in the snapshot's own
// tick cannot hide. The inode catches a path whose file was replaced by
// another one of the snapshot's (mv a b) on a filesystem whose rename
// leaves the moved file's ctime alone. The mtime and size alone would not
// do: a command can write and set the mtime back (touch -r).
func (s *snapshot) Changed(rel string, st fswalk.Stat) (changed, hadDir bool) {
	was, ok := s.stats[rel]
	untouched := ok && was.Ino == st.Ino && was.Mode == st.Mode && was.Size == st.Size && was.MtimeNS == st.MtimeNS &&
		was.CtimeNS == st.CtimeNS && st.CtimeNS < s.since
	return !untouched, ok && was.Kind() == unix.S_IFDIR
}

// Names are the dir's names when the snapshot was taken: what a changed
// dir no longer has was deleted, and a file the host gained meanwhile is
// never reported deleted.
func (s *snapshot) Names(rel string) ([]string, error) { return s.names[rel], nil }

// Skip: the clone is whole (what is masked was removed from it before the
// snapshot, so it is in neither).
func (s *snapshot) Skip(string) bool { return false }

// entrySink takes the walk's entries: fsdelta.Differ's Add, which checks
// each against the host and produces the delta.
type entrySink interface {
	Add(e *wire.FSEntry, content io.Reader) error
}

// walkClone reports to sink what the command changed in the clone (root)
// since snap was taken and the clock at root read since (fswalk.FSTick),
// as a guest reports an overlay's upper dir. The sink compares each entry
// with the original, content included.
func walkClone(root string, snap *snapshot, since int64, sink entrySink) error {
	snap.since = since
	return fswalk.WalkTree(root, snap, sink.Add)
}
