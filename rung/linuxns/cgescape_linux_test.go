package linuxns

import (
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
)

// TestSandboxCannotRaiseItsLimits: a root sandbox tries to reach its own
// cgroup (a cgroup namespace and mount of its own, v1 and v2) and raise its
// limits, leave its group or make groups in the host's tree; every attempt
// fails (seccomp refuses the namespaces; were it off, the namespace's root
// would be the sandbox's run group, below its limits:
// cgroup.TestLimitsAreAboveTheNamespaceRoot), and the limit still holds.
func TestSandboxCannotRaiseItsLimits(t *testing.T) {
	requireNS(t)
	r := boundRung(t)
	script := `
mkdir -p /tmp/cg1 /tmp/cg2
unshare -C -m sh -c '
  mount -t cgroup -o pids none /tmp/cg1 2>/dev/null && { echo MOUNTED1; cat /tmp/cg1/pids.max; echo max > /tmp/cg1/pids.max && echo RAISED1; cat /tmp/cg1/pids.max; echo $$ > /tmp/cg1/../cgroup.procs 2>/dev/null && echo LEFT1; }
  mount -t cgroup2 none /tmp/cg2 2>/dev/null && { echo MOUNTED2; ls /tmp/cg2 | head -3; mkdir /tmp/cg2/dryexec-escape-probe && echo MKDIR2; }
'
(i=0; while [ $i -lt 400 ]; do sleep 5 & i=$((i+1)); done) 2>/dev/null
true`
	d := runBounded(t, r, t.TempDir(), dryexec.TrialSpec{Limits: dryexec.Limits{Pids: 64}, Action: dryexec.Action{TimeoutMS: 20000}}, script)
	t.Logf("stdout:\n%s\nstderr:\n%s", d.Process.Stdout, d.Process.Stderr)
	for _, bad := range []string{"RAISED1", "LEFT1", "MKDIR2"} {
		if strings.Contains(d.Process.Stdout, bad) {
			t.Errorf("the sandbox got %s", bad)
		}
	}
	if len(limitViolations(d, "pids limit 64 reached")) != 1 {
		t.Errorf("the pids limit did not hold after the attempts: violations %+v", d.Violations)
	}
}
