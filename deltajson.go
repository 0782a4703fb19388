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

// WriteJSON writes d to w exactly as json.MarshalIndent(d, "", "  ") and a
// newline would, but one FileChange at a time: a delta of a million files
// never exists whole as JSON in memory (hundreds of MB).
func (d *StateDelta) WriteJSON(w io.Writer) error {
	c := *d
	c.Files = []FileChange{}
	head, err := json.MarshalIndent(&c, "", "  ")
	if err != nil {
		return err
	}
	i := bytes.Index(head, []byte(filesMember))
	if i < 0 {
		return fmt.Errorf("dryexec: encoding the delta: no files member")
	}
	bw := bufio.NewWriterSize(w, 64<<10)
	if len(d.Files) == 0 {
		bw.Write(head)
	} else {
		bw.Write(head[:i+len(filesMember)-1])
		for k := range d.Files {
			if k > 0 {
				bw.WriteByte(',')
			}
			bw.WriteString("\n    ")
			b, err := json.MarshalIndent(&d.Files[k], "    ", "  ")
			if err != nil {
				return err
			}
			bw.Write(b)
		}
		bw.WriteString("\n  ]")
		bw.Write(head[i+len(filesMember):])
	}
	bw.WriteByte('\n')
	return bw.Flush()
}
