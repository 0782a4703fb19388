package seatbelt

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// BenchmarkCloneWalkUntouched: what the snapshot and the walk cost on a
// tree of 10,000 files (100 dirs of 100) that the command left alone: two
// lstats a path and no content read.
func BenchmarkCloneWalkUntouched(b *testing.B) {
	root := b.TempDir()
	for d := range 100 {
		dir := filepath.Join(root, fmt.Sprintf("d%03d", d))
		if err := os.Mkdir(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := range 100 {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d", f)), []byte("x\n"), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ResetTimer()
	for b.Loop() {
		snap, err := takeSnapshot(root)
		if err != nil {
			b.Fatal(err)
		}
		var r recorder
		if err := walkClone(root, snap, 1<<62, &r); err != nil {
			b.Fatal(err)
		}
		if len(r.got) != 0 {
			b.Fatalf("reported %d entries of an untouched tree", len(r.got))
		}
	}
}
