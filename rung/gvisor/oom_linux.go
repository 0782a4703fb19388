package gvisor

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/dryexec/dryexec/internal/procfs"
)

// oomFirst is the host OOM score (oom_score_adj) of the sandbox's stub
// processes, one per process inside gVisor: the score that puts a process
// before any other of the cgroup whatever their resident sets. Raising a
// score needs no privilege (lowering runsc's own needs CAP_SYS_RESOURCE,
// which dryexec does not assume).
const oomFirst = "1000"

// oomOrder has the host OOM killer pick a process inside gVisor before
// runsc's own (runsc, its gofer, its sandbox process: the sentry) when the
// sandbox outgrows its memory limit.
//
// The limit is the host cgroup's, and its OOM killer kills the process with
// the most points: its resident set, plus its score times the limit over
// a thousand. Each process inside gVisor is a host stub process (systrap)
// whose resident set is only what it touched of its memory, while the
// sentry's holds its own code and heap and its mappings of gVisor's memory
// file: a command with 256 MiB allocated showed 72 MiB in its stub against
// the sentry's 76 MiB, and the sentry was killed, which ends everything
// inside gVisor (a trial incomplete, a session lost; rung/gvisor
// TestSessionMemoryLimit, with -race, whose guest is bigger). With the
// stubs first, the largest stub is chosen (the resident sets still rank
// them among themselves) and gVisor ends the process that ran in it with a
// SIGKILL, as Linux's OOM killer would, and nothing else. Not covered:
// memory the sentry writes for a process (read(2) into its buffers, files
// on gVisor's tmpfs) is in no stub, and the sentry's resident set, then
// the whole sandbox's, outweighs any score (docs/containment.md).
//
// It runs once the guest runs: every stub is cloned from one the sentry
// forked as it booted and inherits that one's score, so the stubs there
// are now are all it need raise; later ones are born with the score.
func (b *box) oomOrder() error {
	if b.limits.MemoryBytes <= 0 || b.Cmd == nil || b.Cmd.Process == nil {
		return nil
	}
	var sentries []int
	for _, pid := range procfs.TaskChildren(b.Cmd.Process.Pid) {
		cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		if slices.Contains(strings.Split(string(cmd), "\x00"), "boot") {
			sentries = append(sentries, pid)
		}
	}
	if len(sentries) != 1 {
		return fmt.Errorf("%w: %d runsc boot processes under runsc, want 1", errOOMOrder, len(sentries))
	}
	for _, pid := range procfs.TaskChildren(sentries[0]) {
		err := os.WriteFile("/proc/"+strconv.Itoa(pid)+"/oom_score_adj", []byte(oomFirst), 0)
		if err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("%w: stub %d: %w", errOOMOrder, pid, err)
		}
	}
	return nil
}

var errOOMOrder = errors.New("putting gVisor's processes first for the host OOM killer")
