package fsdelta

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// benchUpper makes an upper dir holding one modified file, d0500/f050, as overlay
// leaves it: the parent dir copied up, the file with its new content.
func benchUpper(b *testing.B) string {
	up := b.TempDir()
	must(b, os.Mkdir(filepath.Join(up, "d0500"), 0o755))
	must(b, os.WriteFile(filepath.Join(up, "d0500", "f050"), []byte("changed content\n"), 0o644))
	return up
}

func benchDiffer(b *testing.B, lower string, wantChanges int) {
	up := benchUpper(b)
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if got := diffUpper(b, up, lower, false, diffMax); len(got) != wantChanges {
			b.Fatalf("got %d changes, want %d: %+v", len(got), wantChanges, got)
		}
	}
}

// BenchmarkDifferOneChange100k: one modified file in a host tree of 100,000
// files in 1,000 dirs. With BenchmarkDifferOneChangeEmpty, shows that the cost of
// a delta follows what was written, not the size of the tree.
func BenchmarkDifferOneChange100k(b *testing.B) {
	lower := b.TempDir()
	for i := range 1000 {
		d := filepath.Join(lower, fmt.Sprintf("d%04d", i))
		must(b, os.Mkdir(d, 0o755))
		for j := range 100 {
			content := fmt.Sprintf("content of file %d in dir %d\n", j, i)
			must(b, os.WriteFile(filepath.Join(d, fmt.Sprintf("f%03d", j)), []byte(content), 0o644))
		}
	}
	benchDiffer(b, lower, 1) // modify d0500/f050
}

// BenchmarkDifferOneChangeEmpty: the same upper over an empty host tree.
func BenchmarkDifferOneChangeEmpty(b *testing.B) {
	benchDiffer(b, b.TempDir(), 2) // mkdir d0500, create d0500/f050
}
