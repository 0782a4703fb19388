// Package fsdelta owns turning what a sandbox wrote into []dryexec.FileChange:
// the host half of the file delta.
//
// Two halves, split along the trust boundary:
//
//   - the guest half (package fswalk, the only half the guest binary links)
//     walks an overlayfs upper directory inside the
//     sandbox and reports each entry it holds: files, directories, symlinks,
//     fifos, whiteouts (both the 0/0 character-device form and the xattr form),
//     opaque directories and (with redirect_dir=on) renamed directories,
//     reading overlay xattrs only in the namespace the overlay was mounted
//     with. Its cost is O(what was written), never O(the tree); it reaches
//     every level one name at a time, so any depth, with a bounded number of
//     fds.
//   - the host half (this package's Differ) receives those entries, which it does not trust,
//     checks every path, compares each entry with the host's own state (read with
//     openat2 and RESOLVE_NO_SYMLINKS, one name at a time, so a symlink on the
//     host is never followed and no path is too long), hashes contents into a
//     BlobSink and produces the changes as the host would see them if
//     committed: exact name bytes, mtimes, hard-link groups, and a renamed
//     dir as its source's tree created at its new path.
package fsdelta

import (
	"fmt"

	"github.com/dryexec/dryexec/wire"
)

// ErrBadEntry marks an entry the host refuses (bad path, unknown kind, …).
type ErrBadEntry struct {
	Entry  wire.FSEntry
	Reason string
}

func (e *ErrBadEntry) Error() string {
	return fmt.Sprintf("fsdelta: refusing entry %q (mount %d): %s", e.Entry.Path, e.Entry.Mount, e.Reason)
}

// StoreError is a failure to keep a file's content in the blob sink (the
// host's store: a full disk, a permission), as opposed to bad data from the
// guest. Path is the host path whose content was being stored.
type StoreError struct {
	Path string
	Err  error
}

func (e *StoreError) Error() string { return fmt.Sprintf("storing %s: %v", e.Path, e.Err) }
func (e *StoreError) Unwrap() error { return e.Err }
