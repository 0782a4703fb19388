package linuxns

import (
	"time"

	"github.com/dryexec/dryexec"
)

// What other rungs (rung/gvisor) share with ns rather than copy: the checks
// of an action and the collection deadline are the contract's, not ns's.

// CheckAction reports an action no rung can run (empty argv, relative or
// missing cwd, NUL bytes, bad env, negative timeout) as ErrBadAction.
func CheckAction(a dryexec.Action) error { return checkAction(a) }

// CollectDeadline is when a trial whose command started at start and ended
// at end must be done collecting what it wrote (see Rung.CollectMin).
func (r *Rung) CollectDeadline(a dryexec.Action, start, end time.Time) time.Time {
	return r.collectDeadline(a, start, end)
}
