package wire

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

// FSEntry kinds.
const (
	EntryFile     EntryKind = "f"
	EntryDir      EntryKind = "d"
	EntrySymlink  EntryKind = "l"
	EntryWhiteout EntryKind = "w" // the path was deleted
	EntryFIFO     EntryKind = "p" // a named pipe
	EntryOther    EntryKind = "o" // socket, device
)

// FSEntry is one thing the guest found in an upper dir (the body of a
// VerbFSEntry event; fswalk makes them, fsdelta checks them). For EntryFile, Size bytes of content
// follow it on the stream.
//
// Path, Link and Redirect hold the exact bytes of the names (a Linux name is any
// bytes but "/" and NUL). On the wire (JSON, which is UTF-8) one that is not valid
// UTF-8 travels base64-encoded instead (see MarshalJSON): encoding/json would
// turn each invalid byte into U+FFFD, and the host would then report (and commit)
// a change to a different name.
type FSEntry struct {
	Mount  int       `json:"m"`
	Path   string    `json:"p"` // relative to the mount's root, slash-separated
	Kind   EntryKind `json:"k"`
	Mode   uint32    `json:"mode"` // permission bits incl. setuid/setgid/sticky (07777)
	Opaque bool      `json:"opaque,omitempty"`
	Size   int64     `json:"size,omitempty"`
	Link   string    `json:"link,omitempty"`
	// UID and GID own the entry, as the guest sees them. The host trusts them
	// only as far as they are real host ids (see fsdelta.Differ.SetOwner).
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

// entryJSON is FSEntry without its methods, so that encoding/json does not
// recurse into MarshalJSON.
type entryJSON FSEntry

// entryWire is an FSEntry whose names are not all valid UTF-8: each such name
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
func (e FSEntry) MarshalJSON() ([]byte, error) {
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
func (e *FSEntry) UnmarshalJSON(b []byte) error {
	var w entryWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*e = FSEntry(w.entryJSON)
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
			return fmt.Errorf("wire: fs entry has both %s and %s64", f.name, f.name)
		}
		v, err := base64.StdEncoding.DecodeString(*f.b64)
		if err != nil {
			return fmt.Errorf("wire: fs entry's %s64: %w", f.name, err)
		}
		*f.dst = string(v)
	}
	return nil
}

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
