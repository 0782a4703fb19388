package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
)

// zeros reads as n bytes of zeros without holding them.
type zeros struct{ n int64 }

func (z *zeros) Read(p []byte) (int, error) {
	if z.n == 0 {
		return 0, io.EOF
	}
	k := int(min(int64(len(p)), z.n))
	clear(p[:k])
	z.n -= int64(k)
	return k, nil
}

func hashOf(t *testing.T, r io.Reader) string {
	t.Helper()
	h := sha256.New()
	if _, err := io.Copy(h, r); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// allocated is what p takes on disk.
func allocated(t *testing.T, p string) int64 {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Blocks * 512
}

// TestPutBlobSparse: zeros are stored as holes, whatever their place (start,
// middle, end), and the blob reads back as the same bytes, with the same
// hash, as the content it was given.
func TestPutBlobSparse(t *testing.T) {
	const mib = 1 << 20
	data := bytes.Repeat([]byte("data"), 1024) // one block
	tests := []struct {
		name      string
		parts     []io.Reader
		size      int64
		maxOnDisk int64
	}{
		{"all holes", []io.Reader{&zeros{256 * mib}}, 256 * mib, 0},
		{"data in the middle", []io.Reader{&zeros{64 * mib}, bytes.NewReader(data), &zeros{64 * mib}}, 128*mib + 4096, 64 << 10},
		{"data at the start", []io.Reader{bytes.NewReader(data), &zeros{100 * mib}}, 100*mib + 4096, 64 << 10},
		{"data at the end, unaligned", []io.Reader{&zeros{100*mib + 3}, strings.NewReader("tail")}, 100*mib + 7, 64 << 10},
		{"small, all zeros", []io.Reader{&zeros{8192}}, 8192, 0},
		{"small, a zero tail", []io.Reader{strings.NewReader("x"), &zeros{10000}}, 10001, 8192},
		{"no holes", []io.Reader{bytes.NewReader(bytes.Repeat(data, 256))}, mib, 2 * mib},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Open(t.TempDir(), time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			tr, err := s.Begin(dryexec.NewTrialID())
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Abort()
			sha, n, err := tr.PutBlob(io.MultiReader(tt.parts...))
			if err != nil || n != tt.size {
				t.Fatalf("PutBlob: %d bytes, %v; want %d", n, err, tt.size)
			}
			p := filepath.Join(tr.dir, "blobs", sha)
			if got := allocated(t, p); got > tt.maxOnDisk {
				t.Errorf("blob takes %d bytes on disk, want at most %d", got, tt.maxOnDisk)
			}
			f, err := os.Open(p)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			if st, _ := f.Stat(); st.Size() != tt.size {
				t.Errorf("blob is %d bytes long, want %d", st.Size(), tt.size)
			}
			if got := hashOf(t, f); got != sha {
				t.Errorf("blob reads back with sha256 %s, PutBlob said %s", got, sha)
			}
		})
	}
}

// TestPutBlobLimits: a blob past the trial's cap, the store's quota or its
// free-space floor is not kept (no file left behind) but is still read
// whole, its hash and length returned with a ContentNotKeptError; what
// fits is kept; holes cost nothing against any limit.
func TestPutBlobLimits(t *testing.T) {
	const kib = 1 << 10
	c := byte('a')
	x := func(n int) io.Reader { c++; return bytes.NewReader(bytes.Repeat([]byte{c}, n)) }
	type put struct {
		r       io.Reader
		kept    bool
		because string
	}
	tests := []struct {
		name     string
		limits   Limits
		trialCap int64
		existing int // bytes another stored trial takes
		puts     []put
	}{
		{"trial cap", Limits{TrialBytes: 100 * kib}, 0, 0, []put{
			{x(60 * kib), true, ""}, {x(60 * kib), false, "content cap"}, {x(30 * kib), true, ""},
			{&zeros{64 << 20}, true, ""}}},
		{"trial cap set for the trial", Limits{}, 10 * kib, 0, []put{{x(20 * kib), false, "content cap"}}},
		{"no cap", Limits{TrialBytes: -1}, 0, 0, []put{{x(3 << 20), true, ""}}},
		{"store quota", Limits{TotalBytes: 600 * kib}, 0, 512 * kib, []put{
			{x(64 * kib), true, ""}, {x(64 * kib), false, "quota"}}},
		{"free-space floor", Limits{MinFreeBytes: 1 << 62}, 0, 0, []put{{x(kib), false, "free"}, {&zeros{1 << 20}, true, ""}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Open(t.TempDir(), time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			s.SetLimits(tt.limits)
			if tt.existing > 0 {
				other := filepath.Join(s.dir, "trials", dryexec.NewTrialID(), "blobs")
				must(t, os.MkdirAll(other, 0o700))
				must(t, os.WriteFile(filepath.Join(other, "b"), bytes.Repeat([]byte("y"), tt.existing), 0o600))
			}
			tr, err := s.Begin(dryexec.NewTrialID())
			if err != nil {
				t.Fatal(err)
			}
			defer tr.Abort()
			if tt.trialCap != 0 {
				tr.SetTrialCap(tt.trialCap)
			}
			for i, p := range tt.puts {
				var buf bytes.Buffer
				sha, n, err := tr.PutBlob(io.TeeReader(p.r, &buf))
				var nk *dryexec.ContentNotKeptError
				if p.kept {
					if err != nil {
						t.Fatalf("put %d: %v", i, err)
					}
				} else if !errors.As(err, &nk) || !errors.Is(err, dryexec.ErrContentNotKept) || !strings.Contains(nk.Reason, p.because) {
					t.Fatalf("put %d: %v, want not kept because of %q", i, err, p.because)
				}
				if want := hashOf(t, bytes.NewReader(buf.Bytes())); sha != want || n != int64(buf.Len()) {
					t.Errorf("put %d: sha %s n %d, want the whole content's %s %d", i, sha, n, want, buf.Len())
				}
				_, statErr := os.Stat(filepath.Join(tr.dir, "blobs", sha))
				if (statErr == nil) != p.kept {
					t.Errorf("put %d: blob on disk: %v, want %v", i, statErr == nil, p.kept)
				}
			}
			left, _ := os.ReadDir(filepath.Join(tr.dir, "blobs"))
			for _, e := range left {
				if strings.HasPrefix(e.Name(), ".tmp") {
					t.Errorf("temporary file %s left behind", e.Name())
				}
			}
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
