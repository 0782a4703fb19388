package fsdelta

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/dryexec/dryexec/wire"
)

// failingSink refuses every blob, as a full disk does.
type failingSink struct{}

func (failingSink) PutBlob(r io.Reader) (string, int64, error) {
	io.Copy(io.Discard, r)
	return "", 0, syscall.ENOSPC
}

// failingReader is a guest stream that breaks.
type failingReader struct{}

func (failingReader) Read([]byte) (int, error) { return 0, errors.New("stream broken") }

// TestStoreErrorIsTheStores: a blob the store cannot keep is a StoreError
// (the host's fault: full disk), a content stream that breaks is not (the
// guest's).
func TestStoreErrorIsTheStores(t *testing.T) {
	lower := t.TempDir()
	tests := []struct {
		name      string
		sink      failingSink
		content   io.Reader
		wantStore bool
	}{
		{"store full", failingSink{}, strings.NewReader("hello"), true},
		{"stream broken", failingSink{}, failingReader{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := NewDiffer([]Mount{{Path: lower}}, tt.sink, 0)
			defer d.Close()
			err := d.Add(&wire.FSEntry{Path: "f", Kind: wire.EntryFile, Mode: 0o644, Size: 5}, tt.content)
			var se *StoreError
			if got := errors.As(err, &se); got != tt.wantStore {
				t.Fatalf("Add: %v; StoreError %v, want %v", err, got, tt.wantStore)
			}
			if tt.wantStore && (!errors.Is(err, syscall.ENOSPC) || se.Path != filepath.Join(lower, "f")) {
				t.Fatalf("Add: %v (path %q)", err, se.Path)
			}
			if _, err := os.Stat(filepath.Join(lower, "f")); err == nil {
				t.Fatal("the lower dir was written")
			}
		})
	}
}
