package linuxns

import (
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/netsim/netconf"
)

// What other rungs (rung/gvisor) share with ns rather than copy: the checks
// of an action and the collection deadline are the contract's, not ns's.

// CheckAction reports an action no rung can run (empty argv, relative or
// missing cwd, NUL bytes, bad env, negative timeout) as ErrBadAction.
func CheckAction(a dryexec.Action) error { return checkAction(a, false) }

// CollectDeadline is when a trial whose command started at start and ended
// at end must be done collecting what it wrote (see Rung.CollectMin).
func (r *Rung) CollectDeadline(a dryexec.Action, start, end time.Time) time.Time {
	return r.collectDeadline(a, start, end)
}

// Records are the network exchanges netsim kept (headers and bodies,
// bounded and redacted) for TrialSpec.Exchanges; nil without a netsim.
func (n *Net) Records() []netconf.Record {
	if n.n.sim == nil {
		return nil
	}
	return n.n.sim.Records()
}
