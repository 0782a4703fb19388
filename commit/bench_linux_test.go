package commit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/receipt"
)

const (
	benchDirs     = 100
	benchPerDir   = 100
	benchFiles    = benchDirs * benchPerDir
	benchFileSize = 1024
)

// benchSet is 10,000 files of 1 KiB in 100 dirs, both as a trial's blob store
// (what Apply reads) and as a plain tree (what cp -a copies).
type benchSet struct {
	blobs string // dir of <sha256> files
	src   string // the tree
	rel   []string
	shas  []string
}

var (
	benchOnce sync.Once
	benchData benchSet
	benchErr  error
)

// TestMain removes the benchmarks' data, shared by all of them.
func TestMain(m *testing.M) {
	code := m.Run()
	if benchData.src != "" {
		os.RemoveAll(filepath.Dir(benchData.src))
	}
	os.Exit(code)
}

func setupBench(b *testing.B) benchSet {
	benchOnce.Do(func() {
		base, err := os.MkdirTemp("", "commit-bench-")
		if err != nil {
			benchErr = err
			return
		}
		s := benchSet{blobs: filepath.Join(base, "blobs"), src: filepath.Join(base, "src")}
		os.Mkdir(s.blobs, 0o755)
		os.Mkdir(s.src, 0o755)
		buf := make([]byte, benchFileSize)
		for d := 0; d < benchDirs; d++ {
			dir := fmt.Sprintf("d%03d", d)
			if err := os.Mkdir(filepath.Join(s.src, dir), 0o755); err != nil {
				benchErr = err
				return
			}
			for f := 0; f < benchPerDir; f++ {
				for i := range buf {
					buf[i] = byte('a' + (d*31+f*7+i)%26)
				}
				copy(buf, fmt.Sprintf("%s/f%03d\n", dir, f))
				sum := sha256.Sum256(buf)
				h := hex.EncodeToString(sum[:])
				rel := fmt.Sprintf("%s/f%03d", dir, f)
				if err := os.WriteFile(filepath.Join(s.blobs, h), buf, 0o644); err != nil {
					benchErr = err
					return
				}
				if err := os.WriteFile(filepath.Join(s.src, rel), buf, 0o644); err != nil {
					benchErr = err
					return
				}
				s.rel, s.shas = append(s.rel, rel), append(s.shas, h)
			}
		}
		benchData = s
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	return benchData
}

// benchDelta creates the set under root.
func (s benchSet) delta(root string) *dryexec.StateDelta {
	files := make([]dryexec.FileChange, 0, benchDirs+benchFiles)
	for d := 0; d < benchDirs; d++ {
		files = append(files, dryexec.FileChange{Path: filepath.Join(root, fmt.Sprintf("d%03d", d)),
			Op: dryexec.OpMkdir, Kind: dryexec.KindDir, Mode: "0755"})
	}
	for i, rel := range s.rel {
		files = append(files, dryexec.FileChange{Path: filepath.Join(root, rel), Op: dryexec.OpCreate,
			Kind: dryexec.KindFile, Mode: "0644", Size: benchFileSize, SHA256: s.shas[i]})
	}
	return &dryexec.StateDelta{TrialID: "tr_benchbenchbenchbench", Files: files}
}

// benchLoop runs op on a fresh empty dir per iteration; making and removing
// the dirs, and flushing what that dirtied, are not timed.
func benchLoop(b *testing.B, op func(dst string) error) {
	work := b.TempDir()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		dst := filepath.Join(work, fmt.Sprintf("run%d", i))
		if err := os.Mkdir(dst, 0o755); err != nil {
			b.Fatal(err)
		}
		unix.Sync()
		b.StartTimer()
		if err := op(dst); err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		os.RemoveAll(dst)
		b.StartTimer()
	}
	b.ReportMetric(float64(benchFiles)*float64(b.N)/b.Elapsed().Seconds(), "files/s")
}

// BenchmarkCommit10k: Apply of a delta creating 10,000 files of 1 KiB in 100
// new dirs, read from an on-disk blob store and re-hashed, journaled and
// synced. "verified" is what every commit does now: the stored delta's
// receipt checked (as store.CommitWith does, over the delta's JSON) and
// every content read and hashed once before the host is touched, then again
// as it is staged; "unverified" is the commit as it was before: neither.
//
//	go test ./commit -run '^$' -bench Commit10k -benchtime 5x -count 3
func BenchmarkCommit10k(b *testing.B) {
	s := setupBench(b)
	signer, err := receipt.LoadOrCreate(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	open := func(sha string) (io.ReadCloser, error) { return os.Open(filepath.Join(s.blobs, sha)) }
	for _, verified := range []bool{true, false} {
		name := map[bool]string{true: "verified", false: "unverified"}[verified]
		b.Run(name, func(b *testing.B) {
			jdir := filepath.Join(b.TempDir(), "journal")
			benchLoop(b, func(dst string) error {
				b.StopTimer()
				d := s.delta(dst)
				d.Normalize()
				if err := signer.Sign(d); err != nil {
					return err
				}
				raw, err := json.Marshal(d)
				if err != nil {
					return err
				}
				b.StartTimer()
				if verified {
					if _, err := receipt.Verify(raw, signer.PublicKey()); err != nil {
						return err
					}
				}
				_, err = Apply(context.Background(), d, Options{OpenBlob: open, JournalDir: jdir, skipPrehash: !verified})
				return err
			})
		})
	}
}

// BenchmarkCpA10k: cp -a of the same 10,000 files (no fsync) into a fresh dir.
func BenchmarkCpA10k(b *testing.B) {
	s := setupBench(b)
	benchLoop(b, func(dst string) error {
		out, err := exec.Command("cp", "-a", s.src+"/.", dst).CombinedOutput()
		if err != nil {
			return fmt.Errorf("cp -a: %v: %s", err, out)
		}
		return nil
	})
}

// BenchmarkCpASync10k: cp -a followed by sync, as durable as a commit.
func BenchmarkCpASync10k(b *testing.B) {
	s := setupBench(b)
	benchLoop(b, func(dst string) error {
		out, err := exec.Command("cp", "-a", s.src+"/.", dst).CombinedOutput()
		if err != nil {
			return fmt.Errorf("cp -a: %v: %s", err, out)
		}
		unix.Sync()
		return nil
	})
}

// BenchmarkVerification10k is what verifying adds to a commit of the same
// 10,000 files, alone: the receipt over the delta's JSON, and every content
// read from the blob store and hashed (warm page cache, as right after a
// trial).
//
//	go test ./commit -run '^$' -bench Verification10k -count 3
func BenchmarkVerification10k(b *testing.B) {
	s := setupBench(b)
	signer, err := receipt.LoadOrCreate(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	d := s.delta("/nonexistent")
	d.Normalize()
	if err := signer.Sign(d); err != nil {
		b.Fatal(err)
	}
	raw, err := json.Marshal(d)
	if err != nil {
		b.Fatal(err)
	}
	pl, err := makePlan(d.TrialID, d.Files)
	if err != nil {
		b.Fatal(err)
	}
	open := func(sha string) (io.ReadCloser, error) { return os.Open(filepath.Join(s.blobs, sha)) }
	b.Run("receipt", func(b *testing.B) {
		for b.Loop() {
			if _, err := receipt.Verify(raw, signer.PublicKey()); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("prehash", func(b *testing.B) {
		for b.Loop() {
			a := &applier{opt: Options{OpenBlob: open}, j: &journal{Steps: pl.steps}}
			if err := a.prehash(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	})
}
