package linuxns

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/cgroup"
	"github.com/dryexec/dryexec/internal/acceptance"
	"github.com/dryexec/dryexec/internal/testwait"
)

// prestarted starts a Prestarted for spec and waits until its sandbox is
// ready, so that what the test changes afterwards happens after the
// sandbox was built.
func prestarted(t *testing.T, spec dryexec.TrialSpec) dryexec.Pool {
	t.Helper()
	requireNS(t)
	p := (&Rung{}).Prestart(context.Background(), spec)
	t.Cleanup(func() { p.Close() })
	testwait.For(t, time.Minute, "the prestarted sandbox ready", func() bool { return p.Stats().Ready == 1 })
	return p
}

// leavesNothing checks that no process of this test's trials and no cgroup
// of the trial ids is left.
func leavesNothing(t *testing.T, ids ...string) {
	t.Helper()
	for _, g := range cgroup.Leftovers() {
		for _, id := range ids {
			if strings.Contains(g, id) {
				t.Errorf("the trial's cgroup is left: %s", g)
			}
		}
	}
	if kids := children(t); len(kids) > 0 {
		t.Errorf("processes left as this process's children: %v", kids)
	}
}

// TestPrestartHit: the trial the sandbox was prestarted for runs in it and
// gives the core scenario's delta; the sandbox is gone when Close returns.
func TestPrestartHit(t *testing.T) {
	dir := t.TempDir()
	if err := acceptance.MakeDir(dir); err != nil {
		t.Fatal(err)
	}
	spec := dryexec.TrialSpec{TrialID: dryexec.NewTrialID(), Action: dryexec.Action{Argv: []string{"sh", "-c", acceptance.Script}, Cwd: dir, Env: testPath}}
	p := prestarted(t, spec)
	d, err := p.Trial(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	validate(t, d)
	if err := acceptance.Check(d, dir); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Hits != 1 || s.Misses != 0 || s.Ready != 0 {
		t.Fatalf("stats %+v, want one hit and nothing ready", s)
	}
	p.Close()
	leavesNothing(t, spec.TrialID)
}

// TestPrestartOtherRunsCold: a trial that needs another sandbox than the
// one prestarted (another id, other limits), and any trial after the
// first, runs cold: its own limits hold, and the prestarted sandbox is
// torn down, not kept.
func TestPrestartOtherRunsCold(t *testing.T) {
	dir := t.TempDir()
	base := dryexec.TrialSpec{TrialID: dryexec.NewTrialID(), Action: dryexec.Action{Argv: []string{"true"}, Cwd: dir, Env: testPath}}
	small := base
	small.UpperSizeBytes = 8 << 20
	small.Action.Argv = []string{"sh", "-c", "head -c 16M /dev/zero > big"}
	other := base
	other.TrialID = dryexec.NewTrialID()
	for _, tc := range []struct {
		name string
		spec dryexec.TrialSpec
	}{
		{"other limits", small},
		{"other trial id", other},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := prestarted(t, base)
			d, err := p.Trial(context.Background(), tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			validate(t, d)
			if s := p.Stats(); s.Hits != 0 || s.Misses != 1 {
				t.Fatalf("stats %+v, want one miss", s)
			}
			if tc.spec.UpperSizeBytes != 0 && !hasViolation(d, "upper storage full") {
				t.Fatalf("the cold trial's upper size did not hold: %+v", d.Violations)
			}
			// Taken once: the sandbox the first trial did not use is gone,
			// and the next trial, even the prestarted spec, runs cold.
			if _, err := p.Trial(context.Background(), base); err != nil {
				t.Fatal(err)
			}
			if s := p.Stats(); s.Hits != 0 || s.Misses != 2 {
				t.Fatalf("stats %+v, want two misses", s)
			}
			leavesNothing(t, base.TrialID, tc.spec.TrialID)
		})
	}
}

// TestPrestartNewSecretNotExposed: a credential that appears after the
// sandbox was prestarted (masks are resolved from what exists) makes the
// sandbox stale: the trial runs cold, with the credential masked, and the
// read is reported. The local engine prestarts before the store's start-up
// and the receipt key, so this window is real.
func TestPrestartNewSecretNotExposed(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	dir := t.TempDir()
	cred := home + "/.aws/credentials"
	spec := dryexec.TrialSpec{TrialID: dryexec.NewTrialID(), Action: dryexec.Action{Argv: []string{"sh", "-c", "cat " + cred + "; echo end"}, Cwd: dir, Env: testPath}}
	p := prestarted(t, spec)
	if err := os.MkdirAll(home+"/.aws", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cred, []byte("aws_secret_access_key = SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	d, err := p.Trial(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(d.Process.Stdout, "SECRET") {
		t.Fatalf("a sandbox prestarted before the credential existed showed it: %q", d.Process.Stdout)
	}
	if s := p.Stats(); s.Hits != 0 || s.Misses != 1 {
		t.Fatalf("stats %+v: the stale sandbox was used", s)
	}
	if !hasViolation(d, cred) && !hasViolation(d, home+"/.aws") {
		t.Fatalf("the read of the new credential was not reported: %+v", d.Violations)
	}
}

// TestPrestartClose: a prestarted sandbox no trial took is torn down by
// Close, also while it is still being prepared; Trial afterwards runs
// cold.
func TestPrestartClose(t *testing.T) {
	requireNS(t)
	dir := t.TempDir()
	for _, wait := range []bool{true, false} {
		spec := dryexec.TrialSpec{TrialID: dryexec.NewTrialID(), Action: dryexec.Action{Argv: []string{"true"}, Cwd: dir, Env: testPath}}
		var p dryexec.Pool
		if wait {
			p = prestarted(t, spec)
		} else {
			p = (&Rung{}).Prestart(context.Background(), spec)
		}
		p.Close()
		leavesNothing(t, spec.TrialID)
		if _, err := p.Trial(context.Background(), spec); err != nil {
			t.Fatal(err)
		}
		if s := p.Stats(); s.Hits != 0 || s.Misses != 1 {
			t.Fatalf("stats %+v, want one miss after Close", s)
		}
		leavesNothing(t, spec.TrialID)
	}
}

// TestPrepareViewFailureLeavesNothing: the view of the host is resolved
// once the guest has started (Rung.prepare's view); when that fails, the
// started guest, its cgroup and its pipes go, and the error is the view's.
func TestPrepareViewFailureLeavesNothing(t *testing.T) {
	requireNS(t)
	spec := dryexec.TrialSpec{TrialID: dryexec.NewTrialID(), Action: dryexec.Action{Argv: []string{"true"}, Cwd: t.TempDir(), Env: testPath}}
	spec, sb, err := checkBase(spec)
	if err != nil {
		t.Fatal(err)
	}
	errView := errors.New("the mount table cannot be read")
	tr, err := (&Rung{}).prepare(context.Background(), sb, spec.TrialID, func(*sandbox) error { return errView }, false)
	if !errors.Is(err, errView) || tr != nil {
		t.Fatalf("prepare = %v, %v; want the view's error", tr, err)
	}
	leavesNothing(t, spec.TrialID)
}
