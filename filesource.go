package dryexec

import (
	"bytes"
	"encoding/json"
)

// FileSource holds a delta's file changes outside memory. A trial that changes
// a million paths has hundreds of MB of FileChanges; a rung given
// TrialSpec.SpillDir keeps them in a file there instead, and the delta reads
// them back one at a time (docs/limits.md, "Big deltas: memory").
type FileSource interface {
	// Len is the number of changes.
	Len() int
	// Each calls fn with every change, in the delta's order, stopping at the
	// first error fn (or reading) returns. fn must not keep c past its call.
	Each(fn func(c *FileChange) error) error
}

// SetFileSource makes src the delta's file changes: Files becomes nil, and
// every reader of the changes (EachFile, NumFiles, WriteJSON, MarshalJSON,
// LoadFiles) goes to src. A nil src takes the changes back to Files (empty).
func (d *StateDelta) SetFileSource(src FileSource) {
	d.Files, d.fileSrc = nil, src
	if src == nil {
		d.Files = []FileChange{}
	}
}

// Spilled reports whether the delta's file changes are in a FileSource rather
// than in Files.
func (d *StateDelta) Spilled() bool { return d.fileSrc != nil }

// NumFiles is the number of file changes, wherever they are.
func (d *StateDelta) NumFiles() int {
	if d.fileSrc != nil {
		return d.fileSrc.Len()
	}
	return len(d.Files)
}

// EachFile calls fn with every file change in order, from Files or from the
// delta's FileSource, and stops at the first error. fn must not keep c past
// its call (for a spilled delta it is reused).
func (d *StateDelta) EachFile(fn func(c *FileChange) error) error {
	if d.fileSrc != nil {
		return d.fileSrc.Each(fn)
	}
	for i := range d.Files {
		if err := fn(&d.Files[i]); err != nil {
			return err
		}
	}
	return nil
}

// LoadFiles brings a spilled delta's changes into Files (all of them, in
// memory) and drops the source; for a delta that is not spilled it does
// nothing.
func (d *StateDelta) LoadFiles() error {
	if d.fileSrc == nil {
		return nil
	}
	files := make([]FileChange, 0, d.fileSrc.Len())
	if err := d.fileSrc.Each(func(c *FileChange) error {
		files = append(files, *c)
		return nil
	}); err != nil {
		return err
	}
	d.Files, d.fileSrc = files, nil
	return nil
}

// stateDeltaJSON is StateDelta without its methods, so that encoding/json
// does not recurse into MarshalJSON.
type stateDeltaJSON StateDelta

// MarshalJSON encodes d as its fields say, with a spilled delta's changes read
// from its source: whatever marshals a delta (json.Marshal, a response writer)
// gets all of them, never an empty list. WriteJSON does the same without the
// whole document in memory.
func (d StateDelta) MarshalJSON() ([]byte, error) {
	if d.fileSrc == nil {
		return json.Marshal((*stateDeltaJSON)(&d))
	}
	var b bytes.Buffer
	if err := d.WriteJSON(&b); err != nil {
		return nil, err
	}
	var c bytes.Buffer
	if err := json.Compact(&c, b.Bytes()); err != nil {
		return nil, err
	}
	return c.Bytes(), nil
}
