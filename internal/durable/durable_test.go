package durable

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFile(t *testing.T) {
	for _, tc := range []struct {
		name    string
		setup   func(t *testing.T, path string)
		wantErr bool
		want    string // path's content after, "" for a directory left as it was
	}{
		{name: "new", setup: func(*testing.T, string) {}, want: "new"},
		{name: "replaces", setup: func(t *testing.T, p string) {
			if err := os.WriteFile(p, []byte("old"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, want: "new"},
		// The rename fails (a directory is in the way): nothing changes,
		// no temporary file is left.
		{name: "refused", setup: func(t *testing.T, p string) {
			if err := os.MkdirAll(filepath.Join(p, "keep"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, wantErr: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "f")
			tc.setup(t, p)
			err := WriteFile(p, []byte("new"))
			if (err != nil) != tc.wantErr {
				t.Fatalf("WriteFile: %v, want error %v", err, tc.wantErr)
			}
			if _, err := os.Lstat(p + ".tmp"); !errors.Is(err, fs.ErrNotExist) {
				t.Errorf("the temporary file is left: %v", err)
			}
			if tc.wantErr {
				if _, err := os.Stat(filepath.Join(p, "keep")); err != nil {
					t.Errorf("what was at the path is gone: %v", err)
				}
				return
			}
			b, err := os.ReadFile(p)
			if err != nil || string(b) != tc.want {
				t.Errorf("content %q, %v; want %q", b, err, tc.want)
			}
		})
	}
}
