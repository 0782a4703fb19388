package cli

import (
	"fmt"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/front"
)

// The values of `dryexec run --exit-status`. By default run exits with the
// decision (exitCode, docs/decision.md): a command's own status could fake
// one. Tools that wrap commands (make, CI scripts, editors) want the command's
// status instead; --exit-status command gives it them, the decision still in
// the summary and the JSON. dryexec's own failures keep their codes (2
// usage, 125 internal, 130/143 interrupted), and so does a refused --commit
// (1): those say the command's status is not what happened.
const (
	exitDecision = "decision"
	exitCommand  = "command"
)

func checkExitStatus(v string) error {
	if v != exitDecision && v != exitCommand {
		return usageError{fmt.Errorf("--exit-status %q: want decision (the default) or command", v)}
	}
	return nil
}

// runStatus is run's status for a trial that ran: the decision's code, or
// the command's own (the guest already made a signal 128+N and a timeout 124,
// as shells and timeout(1) do).
// The front (internal/front) gives the same status for a trial it ran
// through the daemon: the rule is its, for both.
func runStatus(mode string, d *dryexec.StateDelta) int { return front.RunStatus(mode, d) }
