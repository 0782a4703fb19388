package dryexec

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
)

// filesMember is how json.MarshalIndent(d, "", "  ") writes an empty Files:
// the one top-level member at that indent that is an empty array named so.
const filesMember = "\n  \"files\": []"

// WriteJSON writes d to w as json.MarshalIndent(d, "", "  ") and a newline
// would, but with <, > and & as themselves (UnescapeHTML) and one
// FileChange at a time: a delta of a million files never exists whole as
// JSON in memory (hundreds of MB). Touched, which follows Files and is left
// out when empty, is streamed the same way. The receipt's digest is over the
// canonical form, which reads either spelling the same.
func (d *StateDelta) WriteJSON(w io.Writer) error {
	c := *d
	c.Files, c.fileSrc, c.Touched = []FileChange{}, nil, nil
	head, err := json.MarshalIndent(&c, "", "  ")
	if err != nil {
		return err
	}
	i := bytes.Index(head, []byte(filesMember))
	if i < 0 {
		return fmt.Errorf("dryexec: encoding the delta: no files member")
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	bw.Write(UnescapeHTML(head[:i+len(filesMember)-1]))
	k := 0
	if err := d.EachFile(func(f *FileChange) error {
		k++
		return writeChange(bw, k, f)
	}); err != nil {
		return err
	}
	if k > 0 {
		bw.WriteString("\n  ")
	}
	bw.WriteByte(']')
	if len(d.Touched) > 0 {
		bw.WriteString(",\n  \"touched\": [")
		for k := range d.Touched {
			if err := writeChange(bw, k+1, &d.Touched[k]); err != nil {
				return err
			}
		}
		bw.WriteString("\n  ]")
	}
	bw.Write(UnescapeHTML(head[i+len(filesMember):]))
	bw.WriteByte('\n')
	return bw.Flush()
}

// writeChange writes f, the k-th (from 1) member of an array of changes, as
// MarshalIndent indents it one level below the top.
func writeChange(bw *bufio.Writer, k int, f *FileChange) error {
	if k > 1 {
		bw.WriteByte(',')
	}
	bw.WriteString("\n    ")
	b, err := json.MarshalIndent(f, "    ", "  ")
	if err != nil {
		return err
	}
	_, err = bw.Write(UnescapeHTML(b))
	return err
}

// UnescapeHTML returns JSON text b (as encoding/json writes it) with the
// escapes encoding/json adds for HTML — \u003c, \u003e, \u0026 — written
// as <, > and &: the same JSON value, readable (a path "a<b>&c" shows as
// such). Every other escape is left as it is. It edits b in place.
func UnescapeHTML(b []byte) []byte {
	if !bytes.Contains(b, []byte(`\u00`)) {
		return b
	}
	out := b[:0]
	for i := 0; i < len(b); i++ {
		if b[i] != '\\' || i+1 >= len(b) {
			out = append(out, b[i])
			continue
		}
		// An escape: \uXXXX or a two-byte one (\\ included, so that the
		// backslash of \\u003c is not read as the start of \u003c).
		if b[i+1] == 'u' && i+6 <= len(b) {
			switch string(b[i+2 : i+6]) {
			case "003c":
				out = append(out, '<')
				i += 5
				continue
			case "003e":
				out = append(out, '>')
				i += 5
				continue
			case "0026":
				out = append(out, '&')
				i += 5
				continue
			}
		}
		out = append(out, b[i], b[i+1])
		i++
	}
	return out
}
