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

// BenchmarkDifferHostFS: the Differ's host reads through openat2 (Linux's)
// and through the portable walk (darwin's, run here on Linux), in one run:
// 2,000 modified files in 100 dirs, each looked up and hashed on the host.
// The walk pays an fstat of the parent per open (the device check).
func BenchmarkDifferHostFS(b *testing.B) {
	lower := b.TempDir()
	var adds []add
	for i := range 100 {
		dir := fmt.Sprintf("d%03d", i)
		must(b, os.Mkdir(filepath.Join(lower, dir), 0o755))
		adds = append(adds, dEntry(dir))
		for j := range 20 {
			p := fmt.Sprintf("%s/f%02d", dir, j)
			must(b, os.WriteFile(filepath.Join(lower, p), []byte("host "+p+"\n"), 0o644))
			adds = append(adds, fEntry(p, "changed "+p+"\n"))
		}
	}
	for _, h := range hostFSes {
		b.Run(h.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				d := NewDiffer([]Mount{{Path: lower}}, nil, diffMax)
				d.host = h.fs
				for _, a := range adds {
					e := a.e
					if err := d.Add(&e, a.reader()); err != nil {
						b.Fatal(err)
					}
				}
				got, err := d.Finish()
				if err != nil || len(got) != 2000 {
					b.Fatalf("%d changes, %v", len(got), err)
				}
				d.Close()
			}
		})
	}
}
