package commit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/dryexec/dryexec"
)

// TestCommitKeepsHoles: a stored sparse file is committed sparse — its data
// where the blob has data, holes where it has holes, the whole length — and
// the content is verified as ever (a hole hashes as its zeros). A 256 MiB file
// with 8 KiB of data must not allocate its zeros on the host.
func TestCommitKeepsHoles(t *testing.T) {
	const size = 256 << 20
	data := map[int64]string{0: "head", 100 << 20: "middle", size - 5: "tail!"}
	tests := []struct {
		name string
		size int64
		data map[int64]string
	}{
		{"data at both ends", size, data},
		{"a hole at the end", size, map[int64]string{4096: "x"}},
		{"all hole", size, nil},
		{"no hole", 3, map[int64]string{0: "abc"}},
		{"empty", 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFx(t, nil)
			blobDir := t.TempDir()
			blob := filepath.Join(blobDir, "b")
			bf, err := os.Create(blob)
			if err != nil {
				t.Fatal(err)
			}
			if err := bf.Truncate(tt.size); err != nil {
				t.Fatal(err)
			}
			for off, s := range tt.data {
				if _, err := bf.WriteAt([]byte(s), off); err != nil {
					t.Fatal(err)
				}
			}
			bf.Close()
			sum := hashFile(t, blob)
			c := dryexec.FileChange{Path: f.p("sparse"), Op: dryexec.OpCreate, Kind: dryexec.KindFile, Mode: "0644", Size: tt.size, SHA256: sum}
			opt := f.opt()
			opt.OpenBlob = func(string) (io.ReadCloser, error) { return os.Open(blob) }
			if _, err := Apply(context.Background(), f.delta(c), opt); err != nil {
				t.Fatal(err)
			}
			if got := hashFile(t, f.p("sparse")); got != sum {
				t.Fatalf("committed content %s, want %s", got, sum)
			}
			var st syscall.Stat_t
			if err := syscall.Stat(f.p("sparse"), &st); err != nil {
				t.Fatal(err)
			}
			if st.Size != tt.size {
				t.Fatalf("size %d, want %d", st.Size, tt.size)
			}
			if alloc := st.Blocks * 512; alloc > 1<<20 {
				t.Fatalf("%d bytes allocated for a file with %d bytes of data: the holes were written as zeros", alloc, len(tt.data)*8)
			}
		})
	}
}

func hashFile(t *testing.T, p string) string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}
