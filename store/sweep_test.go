package store

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
)

func saveTrial(t *testing.T, s *Store) string {
	t.Helper()
	id := dryexec.NewTrialID()
	tr, err := s.Begin(id)
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Save(&dryexec.StateDelta{TrialID: id, Rung: "ns"}); err != nil {
		t.Fatal(err)
	}
	return id
}

func age(t *testing.T, s *Store, id string, by time.Duration) {
	t.Helper()
	old := time.Now().Add(-by)
	if err := os.Chtimes(filepath.Join(s.trialDir(id), "delta.json"), old, old); err != nil {
		t.Fatal(err)
	}
}

// TestExpiryWithoutSweep: GCDue skips sweeps that come too soon after the
// last one, so an expired trial may still be on disk; Load must treat it as
// gone all the same (and remove it), and the next due sweep removes the rest.
// What a crash leaves is SweepLeftovers', at every command, due or not.
func TestExpiryWithoutSweep(t *testing.T) {
	s, err := Open(t.TempDir(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	first := saveTrial(t, s)
	age(t, s, first, 2*time.Hour)
	if n, err := s.GCDue(); err != nil || n != 1 {
		t.Fatalf("first GCDue removed %d (%v), want the expired trial", n, err)
	}
	a, b := saveTrial(t, s), saveTrial(t, s)
	age(t, s, a, 2*time.Hour)
	age(t, s, b, 2*time.Hour)
	// What a crash leaves is removed even when no sweep is due.
	dead, err := s.Begin(dryexec.NewTrialID())
	if err != nil {
		t.Fatal(err)
	}
	if err := dead.PutExchanges([]byte("[]")); err != nil {
		t.Fatal(err)
	}
	dead.lock.Close() // as its killed owner would have
	if n, err := s.GCDue(); err != nil || n != 0 {
		t.Fatalf("a GCDue right after one removed %d (%v), want nothing (expiry not due)", n, err)
	}
	if n, err := s.SweepLeftovers(); err != nil || n != 1 {
		t.Fatalf("SweepLeftovers removed %d (%v), want only the half-recorded trial", n, err)
	}
	if _, err := os.Stat(dead.dir); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the half-recorded trial is still there: %v", err)
	}
	if _, err := s.Load(a); !errors.Is(err, dryexec.ErrTrialNotFound) {
		t.Fatalf("Load of an expired, unswept trial: %v, want not found", err)
	}
	if _, err := os.Stat(s.trialDir(a)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the expired trial Load refused is still on disk: %v", err)
	}
	fresh := saveTrial(t, s)
	if _, err := s.Load(fresh); err != nil {
		t.Fatalf("Load of a fresh trial: %v", err)
	}
	// Not due while the stamp is younger than the interval (a tenth of
	// the TTL, here 6 minutes, at most gcEvery), due again once older.
	old := time.Now().Add(-5 * time.Minute)
	if err := os.Chtimes(filepath.Join(s.dir, "swept"), old, old); err != nil {
		t.Fatal(err)
	}
	if n, err := s.GCDue(); err != nil || n != 0 {
		t.Fatalf("a GCDue 5 minutes after one removed %d (%v), want nothing (due after 6)", n, err)
	}
	old = time.Now().Add(-7 * time.Minute)
	if err := os.Chtimes(filepath.Join(s.dir, "swept"), old, old); err != nil {
		t.Fatal(err)
	}
	if n, err := s.GCDue(); err != nil || n != 1 {
		t.Fatalf("a due GCDue removed %d (%v), want the other expired trial", n, err)
	}
	if _, err := s.Load(fresh); err != nil {
		t.Fatalf("the sweep took a fresh trial: %v", err)
	}
}

// TestBeginWritesNothing: a trial's record appears only once it has
// something to keep, and a trial aborted before that leaves nothing.
func TestBeginWritesNothing(t *testing.T) {
	s, err := Open(t.TempDir(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	tr, err := s.Begin(dryexec.NewTrialID())
	if err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(filepath.Join(s.dir, "trials"))
	if len(ents) != 0 {
		t.Fatalf("Begin wrote %v", ents)
	}
	tr.Abort()
	id := saveTrial(t, s)
	if _, err := s.Load(id); err != nil {
		t.Fatalf("a trial saved without blobs: %v", err)
	}
	if _, err := os.Stat(s.trialDir(id) + ".partial"); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the .partial dir survived Save: %v", err)
	}
}

func TestValidID(t *testing.T) {
	for _, tc := range []struct {
		id   string
		want bool
	}{
		{dryexec.NewTrialID(), true},
		{"tr_abcdefghijklmnopqrst", true},
		{"tr_234567234567234567zz", true},
		{"tr_abcdefghijklmnopqrs", false},   // 19 after the prefix
		{"tr_abcdefghijklmnopqrstu", false}, // 21
		{"tr_abcdefghijklmnopqrs1", false},  // 1 is not base32
		{"tr_abcdefghijklmnopqrs8", false},
		{"tr_Abcdefghijklmnopqrst", false},
		{"tx_abcdefghijklmnopqrst", false},
		{"tr_abcdefghij/lmnopqrst", false},
		{"tr_abcdefghij.lmnopqrst", false},
		{"tr_abcdefghijklmnopqr\xc3\xa9", false}, // the right length in bytes, not base32
		{"../abcdefghijklmnopqrst", false},
		{"", false},
		{"tr_", false},
	} {
		if got := ValidID(tc.id); got != tc.want {
			t.Errorf("ValidID(%q) = %v, want %v", tc.id, got, tc.want)
		}
	}
}

// BenchmarkSweepLeftovers is what every command pays for the store's
// leftover sweep, with a few thousand trials kept.
func BenchmarkSweepLeftovers(b *testing.B) {
	s, err := Open(b.TempDir(), time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	for range 2000 {
		if err := os.Mkdir(s.trialDir(dryexec.NewTrialID()), 0o700); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	for b.Loop() {
		if n, err := s.SweepLeftovers(); err != nil || n != 0 {
			b.Fatal(n, err)
		}
	}
}

// BenchmarkGCDue is the due GC a CLI command runs at most every gcEvery,
// with a few thousand trials kept (none of them with content).
func BenchmarkGCDue(b *testing.B) {
	s, err := Open(b.TempDir(), time.Hour)
	if err != nil {
		b.Fatal(err)
	}
	for range 2000 {
		tr, err := s.Begin(dryexec.NewTrialID())
		if err != nil {
			b.Fatal(err)
		}
		if err := tr.Save(&dryexec.StateDelta{TrialID: tr.id, Rung: "ns"}); err != nil {
			b.Fatal(err)
		}
	}
	stamp := filepath.Join(s.dir, "swept")
	b.ResetTimer()
	for b.Loop() {
		old := time.Now().Add(-time.Hour)
		if err := os.Chtimes(stamp, old, old); err != nil && !errors.Is(err, os.ErrNotExist) {
			b.Fatal(err)
		}
		if _, err := s.GCDue(); err != nil {
			b.Fatal(err)
		}
	}
}
