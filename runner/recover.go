package runner

import (
	"github.com/dryexec/dryexec/cgroup"
	"github.com/dryexec/dryexec/commit"
	"github.com/dryexec/dryexec/store"
)

// Recovery is what Recover found and cleaned.
type Recovery struct {
	// Groups is how many sandbox cgroups whose creating process is gone
	// were removed, every process still in them killed first.
	Groups int
	// Commits are the commits a crash interrupted, each finished or rolled
	// back.
	Commits []commit.Recovered
	// Leftovers is how many half-recorded trials and interrupted discards
	// were removed.
	Leftovers int
}

// Recover cleans what a dryexec process killed mid-way left: the cgroups of
// its sandboxes and whatever still runs in them (a sandbox's processes die
// with its guest, but a group outlives its creator and a process someone
// moved into it does too), the commits it interrupted (store.Recover) and
// the trials it left half-recorded (store.SweepLeftovers).
//
// It is an explicit call, made once at start-up by the CLI before a command
// that uses the store and by the daemon before it serves, and never a side
// effect of opening the store: killing processes is not what a reader of the
// store (a test, `verify`, a library user) expects, and a start-up that
// kills should say so where it does.
//
// The cgroup sweep is best effort (rootless cannot remove root's groups, and
// nothing else depends on it); the error is the store's.
func Recover(st *store.Store) (Recovery, error) {
	n := RecoverSandboxes()
	r, err := RecoverStore(st)
	r.Groups = n
	return r, err
}

// RecoverStore is the part of Recover that needs the store: interrupted
// commits and half-recorded trials. The CLI calls it, and RecoverSandboxes
// beside the command rather than before it (the sweep walks every cgroup
// hierarchy of the host, and nothing the command does depends on it: a
// group is an orphan only once its creator is gone, so a sweep never touches
// a live process's sandbox).
func RecoverStore(st *store.Store) (Recovery, error) {
	var r Recovery
	rec, err := st.Recover()
	r.Commits = rec
	if err != nil {
		return r, err
	}
	r.Leftovers, err = st.SweepLeftovers()
	return r, err
}

// RecoverSandboxes is the part of Recover that needs no store: it removes
// the cgroups of sandboxes whose creating process is gone, killing what
// still runs in them, and returns how many it removed. A start-up that
// records nothing (`dryexec run --no-store`) calls it alone. Like Recover,
// it is never a side effect: making a sandbox's limits sweeps nothing.
func RecoverSandboxes() int {
	n, _ := cgroup.Sweep()
	return n
}
