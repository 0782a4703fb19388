package dryexec

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// A file name on Linux is any bytes but "/" and NUL; JSON strings are UTF-8.
// FileChange.Path and LinkTarget hold the exact bytes in Go. In JSON, a path
// that is not valid UTF-8 is written twice: "path" readable (each invalid byte
// as U+FFFD) and "path_b64" (standard base64 of the exact bytes), and readers
// take path_b64 when it is there. Two names that differ only in invalid bytes
// therefore never collide once decoded.

// fileChangeJSON is FileChange without its methods, so that encoding/json does
// not recurse into MarshalJSON.
type fileChangeJSON FileChange

type fileChangeWire struct {
	fileChangeJSON
	PathB64       string `json:"path_b64,omitempty"`
	LinkTargetB64 string `json:"link_target_b64,omitempty"`
}

// MarshalJSON writes Path and LinkTarget losslessly (see above).
func (c FileChange) MarshalJSON() ([]byte, error) {
	w := fileChangeWire{fileChangeJSON: fileChangeJSON(c)}
	if !utf8.ValidString(c.Path) {
		w.Path = strings.ToValidUTF8(c.Path, "\uFFFD")
		w.PathB64 = base64.StdEncoding.EncodeToString([]byte(c.Path))
	}
	if !utf8.ValidString(c.LinkTarget) {
		w.LinkTarget = strings.ToValidUTF8(c.LinkTarget, "\uFFFD")
		w.LinkTargetB64 = base64.StdEncoding.EncodeToString([]byte(c.LinkTarget))
	}
	return json.Marshal(w)
}

// UnmarshalJSON restores the exact bytes from path_b64 and link_target_b64.
func (c *FileChange) UnmarshalJSON(b []byte) error {
	var w fileChangeWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	*c = FileChange(w.fileChangeJSON)
	if w.PathB64 != "" {
		p, err := base64.StdEncoding.DecodeString(w.PathB64)
		if err != nil {
			return fmt.Errorf("path_b64 of %q: %w", w.Path, err)
		}
		c.Path = string(p)
	}
	if w.LinkTargetB64 != "" {
		p, err := base64.StdEncoding.DecodeString(w.LinkTargetB64)
		if err != nil {
			return fmt.Errorf("link_target_b64 of %q: %w", w.Path, err)
		}
		c.LinkTarget = string(p)
	}
	return nil
}

// QuotePath is p for people: as is when it is printable UTF-8, else Go-quoted
// so that invalid bytes show as \xNN and no control reaches a terminal. C1
// controls count (U+009B is CSI to a terminal reading UTF-8), and so do the
// format characters that reorder text (U+202E): strconv.IsPrint says no to
// both, and %q escapes what it says no to.
func QuotePath(p string) string {
	if utf8.ValidString(p) && !strings.ContainsFunc(p, func(r rune) bool { return r != ' ' && !strconv.IsPrint(r) }) {
		return p
	}
	return fmt.Sprintf("%q", p)
}
