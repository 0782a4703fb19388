// Package deltatest owns test helpers for code that reads a StateDelta: a
// delta whose file changes are spilled (a FileSource), as a big trial's are,
// so that a consumer can be tested on both forms; and an in-memory blob store
// to run a trial and commit its delta.
package deltatest

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"

	"github.com/dryexec/dryexec"
)

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

// Blobs is an in-memory blob store: a trial's BlobSink, and the OpenBlob of a
// commit of that trial's delta.
type Blobs map[string][]byte

// PutBlob keeps all of r's bytes under their sha256.
func (b Blobs) PutBlob(r io.Reader) (string, int64, error) {
	data, err := io.ReadAll(r)
	if err != nil {
		return "", int64(len(data)), err
	}
	sum := sha256.Sum256(data)
	s := hex.EncodeToString(sum[:])
	b[s] = data
	return s, int64(len(data)), nil
}

// Open returns the blob with sha256 s.
func (b Blobs) Open(s string) (io.ReadCloser, error) {
	data, ok := b[s]
	if !ok {
		return nil, fmt.Errorf("deltatest: no blob %s", s)
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}
