package store

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestGC: gc removes expired trials and the content a crash left of
// finished ones, keeps pending trials whole and finished trials' deltas, and
// says what it freed; Usage counts what is left.
func TestGC(t *testing.T) {
	s, err := Open(t.TempDir(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	w := t.TempDir()
	big := strings.Repeat("x", 1<<20)
	trial := func(name string) string {
		return signedTrial(t, s, "review", map[string]string{filepath.Join(w, name): big + name})
	}
	pending, committed, discarded, expired := trial("p"), trial("c"), trial("d"), trial("e")
	if _, err := s.Commit(context.Background(), committed, CommitOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := s.Discard(discarded); err != nil {
		t.Fatal(err)
	}
	for _, id := range []string{committed, discarded} {
		if _, err := os.Stat(filepath.Join(s.trialDir(id), "blobs")); !os.IsNotExist(err) {
			t.Fatalf("%s still keeps its content after commit or discard: %v", id, err)
		}
	}
	// A crash between the commit and the drop of its content: put it back.
	if err := os.CopyFS(filepath.Join(s.trialDir(committed), "blobs"), os.DirFS(filepath.Join(s.trialDir(pending), "blobs"))); err != nil {
		t.Fatal(err)
	}
	old := time.Now().Add(-2 * time.Hour)
	if err := os.Chtimes(filepath.Join(s.trialDir(expired), "delta.json"), old, old); err != nil {
		t.Fatal(err)
	}
	before, err := s.Usage()
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.GC()
	if err != nil {
		t.Fatal(err)
	}
	if r.Removed != 1 || r.Dropped != 1 || r.Freed < 2<<20 {
		t.Errorf("gc: %+v, want 1 removed, 1 dropped, at least 2 MiB freed", r)
	}
	after, err := s.Usage()
	if err != nil {
		t.Fatal(err)
	}
	if before.Trials != 4 || after.Trials != 3 || after.Bytes >= before.Bytes-(2<<20) || after.Bytes < 1<<20 {
		t.Errorf("usage before %+v, after %+v", before, after)
	}
	for id, want := range map[string]string{pending: StatusPending, committed: StatusCommitted, discarded: StatusDiscarded} {
		if st, err := s.StateOf(id); err != nil || st.Status != want {
			t.Errorf("%s: %v %v, want %s", id, st, err, want)
		}
	}
	if _, err := os.Stat(s.BlobPath(pending, "")); err != nil {
		t.Errorf("the pending trial lost its content: %v", err)
	}
	if _, err := s.Load(expired); err == nil {
		t.Error("the expired trial is still there")
	}
}
