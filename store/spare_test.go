package store

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
)

// spareDirs lists the store's spare directories.
func spareDirs(t *testing.T, s *Store) []string {
	t.Helper()
	got, err := filepath.Glob(filepath.Join(s.dir, "trials", "*.spare"))
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// readySpare waits until the refill in flight (if any) is done and returns
// the one spare directory on disk.
func readySpare(t *testing.T, s *Store) string {
	t.Helper()
	s.spares.wg.Wait()
	got := spareDirs(t, s)
	if len(got) != 1 {
		t.Fatalf("spare dirs: %v, want one", got)
	}
	return got[0]
}

// TestSpareRecordsTrial: a store that keeps a spare records a trial in it —
// with and without content — and publishes it under the trial's id whole,
// visible to Load at once; the spare is replaced after each trial, and a
// sweep leaves the spare it holds alone.
func TestSpareRecordsTrial(t *testing.T) {
	s, err := Open(t.TempDir(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	s.KeepSpare()
	defer s.DropSpare()
	for _, tc := range []struct {
		name    string
		content string
		want    []string
	}{
		{name: "no content", want: []string{"delta.json"}},
		{name: "one blob", content: "hello", want: []string{"blobs", "delta.json"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sp := readySpare(t, s)
			if n, err := s.SweepLeftovers(); err != nil || n != 0 {
				t.Fatalf("a sweep removed %d (%v): the spare in use must stay", n, err)
			}
			d := recordTrial(t, s, tc.content)
			id := d.TrialID
			got, err := s.Load(id)
			if err != nil || got.TrialID != id || len(got.Files) != len(d.Files) {
				t.Fatalf("Load right after Save: %+v, %v", got, err)
			}
			if tc.content != "" {
				if b, err := os.ReadFile(s.BlobPath(id, d.Files[0].SHA256)); err != nil || string(b) != tc.content {
					t.Fatalf("the trial's content: %q, %v", b, err)
				}
			}
			if names := dirNames(t, s.trialDir(id)); !slices.Equal(names, tc.want) {
				t.Fatalf("the trial's directory holds %v, want %v", names, tc.want)
			}
			if _, err := os.Stat(sp); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the spare the trial took is still there: %v", err)
			}
			if next := readySpare(t, s); next == sp {
				t.Fatalf("no new spare after the trial")
			}
		})
	}
}

// TestSpareAbort: a trial aborted in a spare leaves nothing of itself, and
// a new spare is made.
func TestSpareAbort(t *testing.T) {
	s, err := Open(t.TempDir(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	s.KeepSpare()
	defer s.DropSpare()
	sp := readySpare(t, s)
	id := dryexec.NewTrialID()
	tr, err := s.Begin(id)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.PutExchanges([]byte("[]")); err != nil {
		t.Fatal(err)
	}
	tr.Abort()
	if next := readySpare(t, s); next == sp {
		t.Fatalf("the aborted trial's spare is still there")
	}
	ents, _ := os.ReadDir(filepath.Join(s.dir, "trials"))
	if len(ents) != 1 {
		t.Fatalf("after an abort the store holds %v, want the new spare alone", ents)
	}
	if _, err := s.Load(id); !errors.Is(err, dryexec.ErrTrialNotFound) {
		t.Fatalf("Load of the aborted trial: %v", err)
	}
}

// TestSpareLeftByACrash: a spare whose process died (its lock free) is
// removed by the next sweep, as a .partial is; DropSpare removes the one a
// store holds.
func TestSpareLeftByACrash(t *testing.T) {
	s, err := Open(t.TempDir(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	s.KeepSpare()
	sp := readySpare(t, s)
	// As its killed owner would: the lock goes with the process.
	s.spares.mu.Lock()
	dead := s.spares.ready
	s.spares.ready = nil
	s.spares.mu.Unlock()
	dead.delta.Close()
	dead.lock.Close()
	if n, err := s.SweepLeftovers(); err != nil || n != 1 {
		t.Fatalf("the sweep removed %d (%v), want the dead spare", n, err)
	}
	if _, err := os.Stat(sp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the dead spare survived the sweep: %v", err)
	}
	s.refillSpare()
	readySpare(t, s)
	s.DropSpare()
	if left := spareDirs(t, s); len(left) != 0 {
		t.Fatalf("DropSpare left %v", left)
	}
	// A trial after DropSpare makes its own directory.
	id := saveTrial(t, s)
	if _, err := s.Load(id); err != nil {
		t.Fatal(err)
	}
	if left := spareDirs(t, s); len(left) != 0 {
		t.Fatalf("a spare was made after DropSpare: %v", left)
	}
}
