package cli

import (
	"os"
	"testing"
	"time"

	"github.com/dryexec/dryexec/cgroup/cgrouptest"
	"github.com/dryexec/dryexec/internal/testreq"
)

// TestCommandsSweepDeadSandboxes: a command that uses the store (here `ls`,
// and `run --no-store`, which recovers only the sandboxes) has removed what
// a killed dryexec's sandbox left, its group and the process in it, by the
// time it returns, although the sweep now runs beside the command instead of
// before it. Without the sweep's start in startStore the `ls` case fails.
func TestCommandsSweepDeadSandboxes(t *testing.T) {
	testreq.NeedRoot(t)
	for _, args := range [][]string{{"ls"}, {"run", "--no-store", "--", "/bin/true"}} {
		t.Run(args[0], func(t *testing.T) {
			if args[0] == "run" {
				requireNS(t)
			}
			groups, dead := cgrouptest.Orphan(t)
			if code, _, errs := cli(t, t.TempDir(), args...); code != 0 {
				t.Fatalf("dryexec %v: exit %d: %s", args, code, errs)
			}
			for _, g := range groups {
				if _, err := os.Stat(g); err == nil {
					t.Errorf("dryexec %v returned, and the dead sandbox's group %s is still there", args, g)
				}
			}
			select {
			case <-dead:
			case <-time.After(30 * time.Second):
				t.Fatal("the dead sandbox's process survived the command")
			}
		})
	}
}
