package localrun

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/apiclient"
	"github.com/dryexec/dryexec/internal/front"
	"github.com/dryexec/dryexec/netsim/netconf"
	"github.com/dryexec/dryexec/policy"
	"github.com/dryexec/dryexec/receipt"
)

// Exit codes (docs/decision.md). `run` exits with its decision: 0
// auto_commit, ExitReview, ExitBlock, or ExitCommandFailed when the decision
// is review and the command itself failed (its own code is in the delta).
// The command's own code is never passed through, so that none of these can
// be faked by it.
const (
	ExitRefused       = 1   // commit/discard/show/verify refused: unknown trial, conflict, a receipt that does not verify, a blocked trial, paths commit cannot write
	ExitUsage         = 2   // bad flags, arguments or policy file
	ExitReview        = 3   // run: a person should look before this is committed
	ExitBlock         = 4   // run: the policy forbids committing this
	ExitCommandFailed = 5   // run: the command failed (exit ≠ 0, signal, timeout); review
	ExitInternal      = 125 // dryexec failed (not the command): like docker and podman
)

// Exit codes after an interrupt: 128 + the signal's number, as shells report.
const (
	ExitInterrupted = 130 // SIGINT
	ExitTerminated  = 143 // SIGTERM
	ExitBrokenPipe  = 141 // SIGPIPE: the live output's reader went away mid-trial (Live)
)

// UsageError marks a mistake in how dryexec was called (exit 2). Failed
// knows it, and any error of another package that marks the same, by its
// IsUsage method.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }

// IsUsage says the error is the caller's mistake.
func (UsageError) IsUsage() bool { return true }

// usage is what marks a usage error.
type usage interface{ IsUsage() bool }

// Note says what an interrupt at this point did to the trial; commands
// update it as they go.
type Note struct{ s string }

// NewNote is a note that says s.
func NewNote(s string) *Note { return &Note{s: s} }

// Set replaces what the note says.
func (n *Note) Set(format string, a ...any) { n.s = fmt.Sprintf(format, a...) }

func (n *Note) String() string { return n.s }

// Interrupted says what the interrupt that ended ctx (Ctrl-C or SIGTERM:
// main's signal.NotifyContext; a broken pipe: Env.Interrupt) did to the trial, and returns the exit code
// a shell reports for a death by that signal.
func Interrupted(ctx context.Context, env Env, note *Note) int {
	sig, c := front.InterruptedBy(ctx)
	fmt.Fprintf(env.Stderr, "dryexec: interrupted (%s): %s\n", sig, note)
	return c
}

// Failed reports err, the failure of a command, and returns its exit code.
func Failed(env Env, err error) int {
	fmt.Fprintln(env.Stderr, "dryexec:", err)
	var ue usage
	switch {
	case (errors.As(err, &ue) && ue.IsUsage()) || strings.HasPrefix(err.Error(), "unknown command"),
		errors.Is(err, dryexec.ErrBadAction), errors.Is(err, netconf.ErrBadConfig), errors.Is(err, policy.ErrInvalid):
		// The caller's mistake, however deep it was found.
		return ExitUsage
	case errors.Is(err, apiclient.ErrNoDaemon):
		// --via daemon and no daemon of this install: refused, as a
		// rung that cannot run here (nothing ran).
		return ExitRefused
	case errors.Is(err, dryexec.ErrIsolationUnavailable):
		// The host cannot give the isolation asked for: dryexec refuses
		// rather than run with less (dryexec doctor says what is missing).
		fmt.Fprintln(env.Stderr, "dryexec: see dryexec doctor for what this host provides")
		return ExitRefused
	case errors.Is(err, dryexec.ErrTrialNotFound), errors.Is(err, dryexec.ErrAlreadyCommitted),
		errors.Is(err, dryexec.ErrDiscarded), errors.Is(err, dryexec.ErrCommitConflict),
		errors.Is(err, dryexec.ErrUnsafePath), errors.Is(err, receipt.ErrVerify), errors.Is(err, receipt.ErrMalformed),
		errors.Is(err, dryexec.ErrCommitRefused), errors.Is(err, dryexec.ErrTooManyLayers):
		return ExitRefused
	}
	return ExitInternal
}
