package runner_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/cgroup/cgrouptest"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/rung/linuxns"
	"github.com/dryexec/dryexec/runner"
	"github.com/dryexec/dryexec/store"
)

// orphan leaves a sandbox group whose creator is gone with a live process in
// it (cgrouptest.Orphan), and a half-recorded trial in st. It returns the
// group's dirs and a channel closed when the process has died.
func orphan(t *testing.T, st *store.Store) (groups []string, partial string, dead <-chan struct{}) {
	t.Helper()
	groups, dead = cgrouptest.Orphan(t)
	// What a killed recording leaves: a .partial whose lock nobody holds.
	partial = filepath.Join(st.Dir(), "trials", dryexec.NewTrialID()+".partial")
	if err := os.MkdirAll(filepath.Join(partial, "blobs"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(partial, "lock"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	return groups, partial, dead
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// TestRecoverIsExplicit: opening a store, everything a reader of it does,
// and making a new sandbox's limits (as every ns trial and session does
// first) kill nothing and remove nothing a dead process left;
// runner.Recover, the call every start-up makes, kills the orphaned
// sandbox's process, removes its group and the half-recorded trial.
//
// Other dryexec processes on the machine (tests of other packages) sweep
// orphaned groups too, whoever left them: an attempt whose group vanished
// before this test's own call proves nothing either way and is made again.
// If opening the store or making a limiter swept, the group would vanish in
// every attempt.
func TestRecoverIsExplicit(t *testing.T) {
	testreq.NeedRoot(t)
	for attempt := 1; ; attempt++ {
		if attempt > 3 {
			t.Fatal("the orphan vanished before runner.Recover in every attempt: something that is not an explicit recovery swept it")
		}
		home := t.TempDir()
		st, err := store.Open(home, 0)
		if err != nil {
			t.Fatal(err)
		}
		groups, partial, dead := orphan(t, st)
		// Everything but the explicit call.
		st, err = store.Open(home, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := st.Recover(); err != nil {
			t.Fatal(err)
		}
		if _, err := st.List(); err != nil {
			t.Fatal(err)
		}
		lim, err := (&linuxns.Rung{}).NewLimiter(dryexec.NewTrialID(), dryexec.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		lim.Close()
		if !exists(partial) {
			t.Fatal("opening the store removed a half-recorded trial")
		}
		select {
		case <-dead:
			t.Logf("attempt %d: the orphan's process died before runner.Recover", attempt)
			continue
		default:
		}
		if !exists(groups[0]) {
			t.Logf("attempt %d: the orphan's group went before runner.Recover", attempt)
			continue
		}
		rec, err := runner.Recover(st)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range groups {
			if exists(g) {
				t.Fatalf("runner.Recover left the orphaned group %s (%+v)", g, rec)
			}
		}
		select {
		case <-dead:
		case <-time.After(30 * time.Second):
			t.Fatal("the orphaned sandbox's process survived runner.Recover")
		}
		if exists(partial) || rec.Leftovers != 1 {
			t.Fatalf("the half-recorded trial: left %v, counted %d", exists(partial), rec.Leftovers)
		}
		if rec.Groups == 0 {
			t.Logf("attempt %d: another process swept the group during runner.Recover", attempt)
			continue
		}
		return
	}
}
