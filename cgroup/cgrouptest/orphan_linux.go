package cgrouptest

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/cgroup"
	"github.com/dryexec/dryexec/internal/testreq"
)

// orphanEnv makes the test binary the dryexec process that dies mid-trial:
// it makes a sandbox group as the ns rung does, moves the process whose pid
// is in the variable into it, says where the group is, and exits without
// removing it (as a SIGKILL would leave it).
const orphanEnv = "DRYEXEC_CGROUPTEST_ORPHAN"

// MaybeOrphanMain is the dying process of Orphan: a test binary that uses
// Orphan calls it first thing in TestMain; it returns at once otherwise.
func MaybeOrphanMain() {
	if os.Getenv(orphanEnv) == "" {
		return
	}
	fail := func(err error) {
		fmt.Println("ERROR", err)
		os.Exit(1)
	}
	pid, err := strconv.Atoi(os.Getenv(orphanEnv))
	if err != nil {
		fail(err)
	}
	m, err := cgroup.NewManager(cgroup.Options{})
	if err != nil {
		fail(err)
	}
	g, _, err := m.New(dryexec.NewTrialID(), dryexec.Limits{Pids: 64})
	if err != nil {
		fail(err)
	}
	if err := g.Attach(pid); err != nil {
		fail(err)
	}
	if g.CgroupFD() >= 0 {
		// v2 places a process at clone time; a running one is moved by hand.
		for _, p := range g.Paths() {
			os.WriteFile(filepath.Join(p, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
		}
	}
	for _, p := range g.Paths() {
		fmt.Println("GROUP", p)
	}
	os.Exit(0)
}

// Orphan leaves what a dryexec process killed mid-trial leaves: a sandbox
// group whose creator is gone with a live process in it (a child of this
// test). It returns the group's dirs and a channel closed when the process
// has died. The test binary must call MaybeOrphanMain in TestMain.
func Orphan(t *testing.T) (groups []string, dead <-chan struct{}) {
	t.Helper()
	sleeper := exec.Command("sleep", "600")
	if err := sleeper.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { sleeper.Wait(); close(done) }()
	t.Cleanup(func() { sleeper.Process.Kill(); <-done })
	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), orphanEnv+"="+strconv.Itoa(sleeper.Process.Pid))
	out, err := helper.CombinedOutput()
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if p, ok := strings.CutPrefix(sc.Text(), "GROUP "); ok {
			groups = append(groups, p)
		}
	}
	if err != nil || len(groups) == 0 {
		if strings.Contains(string(out), cgroup.ErrUnavailable.Error()) {
			testreq.Needf(t, testreq.Kernel, "cgroups", fmt.Errorf("%s", out))
		}
		t.Fatalf("the dying process: %v\n%s", err, out)
	}
	return groups, done
}
