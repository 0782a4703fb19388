// Package cgroup owns the control groups sandboxes run in: one group per trial
// or session, beneath a "dryexec" parent, with memory, pids and CPU limits,
// on cgroup v2 and on v1 (also hybrid hosts, where the controllers are v1). It
// reads back what the limits did (OOM kills, refused forks, peak memory), kills
// and removes a group at the end, and sweeps groups a dead process left behind.
//
// Pure Go over the cgroup filesystem (x/sys/unix); see docs/limits.md for the
// defaults and the rootless story.
package cgroup

import (
	"errors"
	"fmt"

	"github.com/dryexec/dryexec"
)

// ErrUnavailable: this process cannot create cgroups here (rootless on a v1
// host whose groups are root-owned, a read-only cgroupfs, no controllers). The
// caller falls back and says so; see *UnavailableError for the reason.
var ErrUnavailable = errors.New("cgroup limits unavailable")

// UnavailableError says why groups cannot be created.
type UnavailableError struct{ Reason string }

func (e *UnavailableError) Error() string { return "cgroup limits unavailable: " + e.Reason }

// Is makes errors.Is(err, ErrUnavailable) true.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// ParentName is the directory every dryexec group lives in.
const ParentName = "dryexec"

// Stats is what a group's counters say. Counters only grow, so the difference
// of two Stats is what happened in between.
type Stats struct {
	OOMKills     int64 // processes the kernel OOM-killed at the memory limit
	PidsRefused  int64 // fork/clone calls refused at the pids limit
	PeakMemBytes int64 // peak memory charged to the group (v1 max_usage, v2 memory.peak)
}

// ShelterHeadroom is how many tasks a group's pids limit is raised by while
// the sandbox's supervisor shares it: the Go runtime aborts when it cannot
// start a thread, so a fork bomb must not be able to take the last one. On v1
// the supervisor's threads leave the limit once the command runs (see
// Group.ShelterThreads) and the limit drops to the one asked for; sessions
// and v2 keep the headroom (docs/limits.md).
const ShelterHeadroom = 256

// Violations turns what happened between before and now into {kind: limit}
// violations naming the limit and its value; headroom is what the pids limit
// had on top for the supervisor (Group.PidsHeadroom).
func Violations(l dryexec.Limits, headroom int64, before, now Stats) []dryexec.Violation {
	var out []dryexec.Violation
	if n := now.OOMKills - before.OOMKills; n > 0 {
		out = append(out, dryexec.Violation{Kind: "limit",
			Detail: fmt.Sprintf("memory limit %d bytes (%s) reached: the kernel killed %d process(es) (OOM)", l.MemoryBytes, human(l.MemoryBytes), n)})
	}
	if n := now.PidsRefused - before.PidsRefused; n > 0 {
		extra := ""
		if headroom > 0 {
			extra = fmt.Sprintf(" (with %d more kept for the supervisor)", headroom)
		}
		out = append(out, dryexec.Violation{Kind: "limit",
			Detail: fmt.Sprintf("pids limit %d reached%s: %d fork/clone call(s) refused (EAGAIN)", l.Pids, extra, n)})
	}
	return out
}

func human(b int64) string {
	switch {
	case b >= 1<<30 && b%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", b>>30)
	case b >= 1<<20:
		return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20))
	}
	return fmt.Sprintf("%d B", b)
}
