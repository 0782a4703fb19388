// Package fsdelta owns turning what a sandbox wrote into []dryexec.FileChange.
//
// Two halves, split along the trust boundary:
//
//   - the guest half (Walk) walks an overlayfs upper directory inside the
//     sandbox and reports each entry it holds: files, directories, symlinks,
//     fifos, whiteouts (both the 0/0 character-device form and the xattr form),
//     opaque directories and (with redirect_dir=on) renamed directories,
//     reading overlay xattrs only in the namespace the overlay was mounted
//     with. Its cost is O(what was written), never O(the tree); it reaches
//     every level one name at a time, so any depth, with a bounded number of
//     fds.
//   - the host half (Differ) receives those entries, which it does not trust,
//     checks every path, compares each entry with the host's own state (read with
//     openat2 and RESOLVE_NO_SYMLINKS, one name at a time, so a symlink on the
//     host is never followed and no path is too long), hashes contents into a
//     BlobSink and produces the changes as the host would see them if
//     committed: exact name bytes, mtimes, hard-link groups, and a renamed
//     dir as its source's tree created at its new path.
package fsdelta

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"path"
	"strings"
	"unicode/utf8"
)

// EntryKind is the type of one upper-dir entry.
type EntryKind string

// Entry kinds.
const (
	EntryFile     EntryKind = "f"
	EntryDir      EntryKind = "d"
	EntrySymlink  EntryKind = "l"
	EntryWhiteout EntryKind = "w" // the path was deleted
	EntryFIFO     EntryKind = "p" // a named pipe
	EntryOther    EntryKind = "o" // socket, device
)

// Entry is one thing found in an upper dir. For EntryFile, Size bytes of content
// follow it on the stream.
//
// Path, Link and Redirect hold the exact bytes of the names (a Linux name is any
// bytes but "/" and NUL). On the wire (JSON, which is UTF-8) one that is not valid
// UTF-8 travels base64-encoded instead (see MarshalJSON): encoding/json would
// turn each invalid byte into U+FFFD, and the host would then report (and commit)
// a change to a different name.
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
	// MtimeNS is the entry's modification time (ns since the epoch) as the
	// command left it; 0 for whiteouts.
	MtimeNS int64 `json:"mt,omitempty"`
	// Ino and Nlink identify hard links: set only when the upper inode has
	// more than one link (never for dirs and whiteouts), so that the host can
	// tell which paths are one inode. Ino is the upper's inode number.
	Ino   uint64 `json:"ino,omitempty"`
	Nlink uint32 `json:"nl,omitempty"`
	// Redirect, for a dir the overlay renamed (redirect_dir=on), is the path
	// (relative to the mount's root) of the host dir whose contents the merged
	// dir shows beneath what the upper holds. Empty for every other entry.
	Redirect string `json:"redir,omitempty"`
}

// entryJSON is Entry without its methods, so that encoding/json does not
// recurse into MarshalJSON.
type entryJSON Entry

// entryWire is an Entry whose names are not all valid UTF-8: each such name
// is carried base64-encoded (standard encoding) and its plain field is empty.
type entryWire struct {
	entryJSON
	PathB64     string `json:"p64,omitempty"`
	LinkB64     string `json:"link64,omitempty"`
	RedirectB64 string `json:"redir64,omitempty"`
}

// MarshalJSON writes e losslessly: Path, Link and Redirect as they are when
// they are valid UTF-8 (the common case costs nothing more), base64-encoded in
// p64, link64 and redir64 when not.
func (e Entry) MarshalJSON() ([]byte, error) {
	if utf8.ValidString(e.Path) && utf8.ValidString(e.Link) && utf8.ValidString(e.Redirect) {
		return json.Marshal(entryJSON(e))
	}
	w := entryWire{entryJSON: entryJSON(e)}
	for _, f := range []struct{ plain, b64 *string }{
		{&w.Path, &w.PathB64}, {&w.Link, &w.LinkB64}, {&w.Redirect, &w.RedirectB64},
	} {
		if !utf8.ValidString(*f.plain) {
			*f.b64 = base64.StdEncoding.EncodeToString([]byte(*f.plain))
			*f.plain = ""
		}
	}
	return json.Marshal(w)
}

// UnmarshalJSON reads what MarshalJSON wrote. A name given both plain and
// base64-encoded is refused: no honest sender does that.
func (e *Entry) UnmarshalJSON(b []byte) error {
	var w entryWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*e = Entry(w.entryJSON)
	for _, f := range []struct {
		name       string
		plain, b64 *string
		dst        *string
	}{
		{"p", &w.Path, &w.PathB64, &e.Path}, {"link", &w.Link, &w.LinkB64, &e.Link}, {"redir", &w.Redirect, &w.RedirectB64, &e.Redirect},
	} {
		if *f.b64 == "" {
			continue
		}
		if *f.plain != "" {
			return fmt.Errorf("fsdelta: entry has both %s and %s64", f.name, f.name)
		}
		v, err := base64.StdEncoding.DecodeString(*f.b64)
		if err != nil {
			return fmt.Errorf("fsdelta: entry's %s64: %w", f.name, err)
		}
		*f.dst = string(v)
	}
	return nil
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
