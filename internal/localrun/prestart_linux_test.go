package localrun

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/cgroup"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/internal/testwait"
	"github.com/dryexec/dryexec/policy"
	"github.com/dryexec/dryexec/rung/linuxns"
)

// readyFirst is the ns rung whose Prestart returns only once the sandbox
// is ready: what Local does after it then happens, for certain, with a
// guest running and its cgroup made.
type readyFirst struct {
	*linuxns.Rung
	t   *testing.T
	got *dryexec.Pool
}

func (r readyFirst) Prestart(ctx context.Context, spec dryexec.TrialSpec) dryexec.Pool {
	p := r.Rung.Prestart(ctx, spec)
	testwait.For(r.t, time.Minute, "the prestarted sandbox ready", func() bool { return p.Stats().Ready == 1 })
	*r.got = p
	return p
}

// TestPrestartGoesOnFailure: Local starts the trial's sandbox before the
// store's start-up; when that start-up then fails (a bad setting), the
// sandbox is torn down before Local returns: no process of it is left and
// no cgroup of the trial.
func TestPrestartGoesOnFailure(t *testing.T) {
	testreq.Need(t, testreq.NS, (&linuxns.Rung{}).Available(context.Background()))
	home := t.TempDir()
	vars := map[string]string{"DRYEXEC_HOME": home, "DRYEXEC_TRIAL_TTL": "soon", "PATH": "/usr/bin:/bin"}
	env := Env{Stdout: io.Discard, Stderr: io.Discard, Getenv: func(k string) string { return vars[k] }, Sweep: &Sweep{}}
	defer env.Sweep.Wait()
	spec, err := NewSpec(env, []string{"true"}, t.TempDir(), 0, nil, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	var pre dryexec.Pool
	open := func(context.Context, string) (dryexec.Rung, error) {
		return readyFirst{Rung: &linuxns.Rung{}, t: t, got: &pre}, nil
	}
	tr := Trial{Home: home, Open: open, Rung: "ns", Policy: policy.Default(), Note: NewNote("nothing was changed")}
	d, _, err := tr.Local(context.Background(), env, spec)
	if err == nil || !strings.Contains(err.Error(), "DRYEXEC_TRIAL_TTL") {
		t.Fatalf("Local with a bad DRYEXEC_TRIAL_TTL: delta %v, err %v; want the setting's error", d != nil, err)
	}
	if pre == nil {
		t.Fatal("the sandbox was not prestarted")
	}
	if s := pre.Stats(); s.Ready != 0 || s.Hits+s.Misses != 0 {
		t.Fatalf("prestarted sandbox after the failure: %+v, want it torn down unused", s)
	}
	for _, g := range cgroup.Leftovers() {
		if strings.Contains(g, spec.TrialID) {
			t.Errorf("the prestarted trial's cgroup is left: %s", g)
		}
	}
	tasks, err := filepath.Glob("/proc/self/task/*/children")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range tasks {
		if b, _ := os.ReadFile(f); len(strings.Fields(string(b))) > 0 {
			t.Errorf("processes left as this process's children: %s", b)
		}
	}
}
