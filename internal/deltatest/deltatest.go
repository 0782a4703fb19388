// Package deltatest owns test helpers for code that reads a StateDelta: a
// delta whose file changes are spilled (a FileSource), as a big trial's are,
// so that a consumer can be tested on both forms.
package deltatest

import "github.com/dryexec/dryexec"

// Spilled returns a copy of d whose file changes are read from a FileSource
// (one at a time, each a fresh copy) instead of Files.
func Spilled(d *dryexec.StateDelta) *dryexec.StateDelta {
	sp := *d
	sp.SetFileSource(source(d.Files))
	return &sp
}

// source is a FileSource over a slice.
type source []dryexec.FileChange

func (s source) Len() int { return len(s) }

func (s source) Each(fn func(*dryexec.FileChange) error) error {
	for i := range s {
		c := s[i] // a copy: fn must not change the delta through it
		if err := fn(&c); err != nil {
			return err
		}
	}
	return nil
}
