// Package fsdelta owns turning what a sandbox wrote into []dryexec.FileChange.
//
// Two halves, split along the trust boundary:
//
//   - the guest half (WalkUpper) walks an overlayfs upper directory inside the
//     sandbox and reports each entry it holds: files, directories, symlinks,
//     whiteouts (both the 0/0 character-device form and the xattr form) and
//     opaque directories, reading overlay xattrs only in the namespace the
//     overlay was mounted with. Its cost is O(what was written), never O(the tree).
//   - the host half (Differ) receives those entries, which it does not trust,
//     checks every path, compares each entry with the host's own state (read with
//     openat2 and RESOLVE_NO_SYMLINKS, so a symlink on the host is never followed),
//     hashes contents into a BlobSink and produces the changes as the host would
//     see them if committed.
package fsdelta

import (
	"fmt"
	"path"
	"strings"
)

// EntryKind is the type of one upper-dir entry.
type EntryKind string

// Entry kinds.
const (
	EntryFile     EntryKind = "f"
	EntryDir      EntryKind = "d"
	EntrySymlink  EntryKind = "l"
	EntryWhiteout EntryKind = "w" // the path was deleted
	EntryOther    EntryKind = "o" // fifo, socket, device
)

// Entry is one thing found in an upper dir. For EntryFile, Size bytes of content
// follow it on the stream.
type Entry struct {
	Mount  int       `json:"m"`
	Path   string    `json:"p"` // relative to the mount's root, slash-separated
	Kind   EntryKind `json:"k"`
	Mode   uint32    `json:"mode"` // permission bits incl. setuid/setgid/sticky (07777)
	Opaque bool      `json:"opaque,omitempty"`
	Size   int64     `json:"size,omitempty"`
	Link   string    `json:"link,omitempty"`
	// UID and GID own the entry, as the guest sees them. The host trusts them
	// only as far as they are real host ids (see Differ.SetOwner).
	UID int `json:"uid"`
	GID int `json:"gid"`
}

// ErrBadEntry marks an entry the host refuses (bad path, unknown kind, …).
type ErrBadEntry struct {
	Entry  Entry
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

// CheckRelPath reports whether p is a clean relative path that stays beneath its
// root: no leading slash, no "..", no empty or "." components, no NUL.
func CheckRelPath(p string) error {
	switch {
	case p == "" || p == ".":
		return fmt.Errorf("empty path")
	case strings.ContainsRune(p, 0):
		return fmt.Errorf("NUL in path")
	case strings.HasPrefix(p, "/"):
		return fmt.Errorf("absolute path")
	case path.Clean(p) != p:
		return fmt.Errorf("path not clean")
	case p == ".." || strings.HasPrefix(p, "../"):
		return fmt.Errorf("path escapes its root")
	}
	return nil
}
