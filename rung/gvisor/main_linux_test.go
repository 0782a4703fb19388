package gvisor

import (
	"context"
	"encoding/json"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/guest"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/netsim/netrole"
	"github.com/dryexec/dryexec/schema"
)

// TestMain lets this test binary serve as both guests: the rung re-executes
// /proc/self/exe as `dryexec guest gvisor-view`, and runsc starts it again
// inside gVisor as `dryexec guest gvisor-trial`.
func TestMain(m *testing.M) {
	guest.MaybeMain(os.Args)
	netrole.MaybeMain(os.Args)
	testreq.OwnMountNamespace()
	os.Exit(m.Run())
}

// requireGVisor skips (or, where required, fails) a test on a host where the
// rung cannot run; the probe runs once per test binary.
func requireGVisor(t *testing.T) {
	t.Helper()
	probeOnce.Do(func() { probeErr = (&Rung{}).Available(context.Background()) })
	testreq.Need(t, testreq.GVisor, probeErr)
}

// The probe's outcome, once per test binary (it starts a sandbox).
var (
	probeOnce sync.Once
	probeErr  error
)

var testPath = map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"}

// runTrial runs argv in dir on r (a zero Rung when nil) and checks the delta
// against the JSON schema.
func runTrial(t *testing.T, r dryexec.Rung, dir string, spec dryexec.TrialSpec, argv ...string) *dryexec.StateDelta {
	t.Helper()
	if r == nil {
		r = &Rung{}
	}
	spec.Action.Argv, spec.Action.Cwd = argv, dir
	if spec.Action.Env == nil {
		spec.Action.Env = testPath
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := r.Trial(ctx, spec)
	if err != nil {
		t.Fatalf("%s trial %q: %v", r.Name(), argv, err)
	}
	v, err := schema.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Validate(b); err != nil {
		t.Fatalf("delta does not validate: %v\n%s", err, b)
	}
	return d
}
