// Package cgrouptest gives tests that run bombs a hard outer bound: a cgroup
// of the test's own, holding the dryexec parent, with limits of its own. Should
// a sandbox's limits fail, the bomb stops there instead of taking the machine
// down. It is a test helper: only _test files import it.
package cgrouptest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec/cgroup"
	"github.com/dryexec/dryexec/internal/testreq"
)

// Bound makes the bound group (memBytes of memory, pids tasks) in every v1
// memory/pids/cpu hierarchy, beneath this process's own group, and returns the
// cgroup.Options that put sandboxes inside it. It skips t when cgroups cannot
// be made (not root). At the end it removes the group and fails t if a
// dryexec group created by this process is left anywhere in the host's tree.
func Bound(t testing.TB, memBytes, pids int64) cgroup.Options {
	t.Helper()
	testreq.NeedRoot(t)
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	name := "dryexec-bound-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	var made []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			if c != "memory" && c != "pids" && c != "cpu" {
				continue
			}
			d := filepath.Join("/sys/fs/cgroup", c, f[2], name)
			if err := os.Mkdir(d, 0o755); err != nil {
				testreq.Needf(t, testreq.Kernel, "cgroup v1", fmt.Errorf("cannot make a bound group: %w", err))
			}
			made = append(made, d)
			os.WriteFile(filepath.Join(d, "memory.limit_in_bytes"), []byte(strconv.FormatInt(memBytes, 10)), 0)
			os.WriteFile(filepath.Join(d, "pids.max"), []byte(strconv.FormatInt(pids, 10)), 0)
		}
	}
	if len(made) == 0 {
		testreq.Needf(t, testreq.Kernel, "cgroup v1", errors.New("no v1 memory/pids/cpu hierarchy to bound the test with"))
	}
	t.Cleanup(func() {
		mine := "." + strconv.Itoa(os.Getpid()) + "-"
		for _, p := range cgroup.Leftovers() {
			if strings.Contains(p, mine) {
				t.Errorf("a dryexec group of this test is left: %s", p)
			}
		}
		for _, d := range made {
			os.Remove(filepath.Join(d, cgroup.ParentName))
			if err := os.Remove(d); err != nil {
				t.Errorf("removing the bound group: %v", err)
			}
		}
		// A hybrid host's v2 tree gets the same path (sandboxes are placed
		// there too, without limits): remove what was made in it.
		for _, line := range strings.Split(string(b), "\n") {
			if v2, ok := strings.CutPrefix(line, "0::"); ok {
				d := filepath.Join("/sys/fs/cgroup/unified", filepath.Dir(v2), name)
				os.Remove(filepath.Join(d, cgroup.ParentName))
				os.Remove(d)
			}
		}
	})
	return cgroup.Options{Parent: name + "/" + cgroup.ParentName}
}
