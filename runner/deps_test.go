package runner_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestLayering: the pipeline's parts stay apart. The store cannot reach
// cgroup (so opening or reading it can never kill a process: that is
// Recover's, called explicitly), and no rung depends on the store (they need
// only the default home, dryexec.DefaultHome).
func TestLayering(t *testing.T) {
	for _, tc := range []struct{ pkg, banned string }{
		{"github.com/dryexec/dryexec/store", "github.com/dryexec/dryexec/cgroup"},
		{"github.com/dryexec/dryexec/rung", "github.com/dryexec/dryexec/store"},
		{"github.com/dryexec/dryexec/rung/linuxns", "github.com/dryexec/dryexec/store"},
		{"github.com/dryexec/dryexec/rung/gvisor", "github.com/dryexec/dryexec/store"},
	} {
		t.Run(tc.pkg, func(t *testing.T) {
			out, err := exec.Command("go", "list", "-deps", tc.pkg).CombinedOutput()
			if err != nil {
				t.Fatalf("go list: %v %s", err, out)
			}
			for _, dep := range strings.Fields(string(out)) {
				if dep == tc.banned {
					t.Errorf("%s depends on %s", tc.pkg, dep)
				}
			}
		})
	}
}
