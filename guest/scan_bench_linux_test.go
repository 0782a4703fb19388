package guest

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// BenchmarkScanDiff: a scan staging's diff and rebase of an unchanged
// workspace of 2,000 files in 40 dirs (the diff reads no content: the stat
// index vouches for every file), through the roots (os.Root: each
// name looked up beneath a dir fd), against the baseline of one path-based
// lstat of every name of both trees (what any path-based diff costs at
// least) in the same run: compare the ns/op of diff and rebase with
// lstat-walk's.
func BenchmarkScanDiff(b *testing.B) {
	dir := b.TempDir()
	ws, base := filepath.Join(dir, "ws"), filepath.Join(dir, "base")
	for _, d := range []string{ws, base} {
		if err := os.Mkdir(d, 0o755); err != nil {
			b.Fatal(err)
		}
	}
	old := time.Now().Add(-time.Hour)
	for i := range 40 {
		sub := filepath.Join(ws, fmt.Sprintf("d%02d", i), "inner")
		if err := os.MkdirAll(sub, 0o755); err != nil {
			b.Fatal(err)
		}
		for j := range 50 {
			f := filepath.Join(sub, fmt.Sprintf("f%02d.txt", j))
			if err := os.WriteFile(f, []byte("content\n"), 0o644); err != nil {
				b.Fatal(err)
			}
			// Not written just now: the stat index vouches for it, so
			// the diff stats it and reads nothing (the usual case).
			if err := os.Chtimes(f, old, old); err != nil {
				b.Fatal(err)
			}
		}
	}
	st, err := newScanStaging(ws, base)
	if err != nil {
		b.Fatal(err)
	}
	defer st.wsR.Close()
	defer st.baseR.Close()
	if err := st.rebase(); err != nil {
		b.Fatal(err)
	}
	b.Run("lstat-walk", func(b *testing.B) {
		for b.Loop() {
			for _, root := range []string{ws, base} {
				filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
					if err == nil {
						_, err = os.Lstat(p)
					}
					return err
				})
			}
		}
	})
	b.Run("diff", func(b *testing.B) {
		for b.Loop() {
			if d, err := st.diff(); err != nil || len(d.Writes)+len(d.Deletes)+len(d.Modes) != 0 {
				b.Fatalf("%+v, %v", d, err)
			}
		}
	})
	b.Run("rebase", func(b *testing.B) {
		for b.Loop() {
			if err := st.rebase(); err != nil {
				b.Fatal(err)
			}
		}
	})
}
