package seatbelt

import (
	"log/slog"

	"github.com/dryexec/dryexec"
)

// Name is the rung's contract name.
const Name = "seatbelt"

// Unenforced is the warning every seatbelt delta and session carries: what
// the ns rung enforces and Seatbelt here does not.
const Unenforced = "seatbelt rung: no resource limits but the timeout (macOS has no cgroups); a process that leaves the command's session is not stopped by the trial's end"

// Rung runs trials under Seatbelt on macOS. The zero value is ready to use.
type Rung struct {
	// GuestExe is the binary started as `guest session`; empty means
	// guestexe.Executable().
	GuestExe string
	// Log receives debug records; nil logs nothing.
	Log *slog.Logger
}

var _ dryexec.Rung = (*Rung)(nil)

// Name implements dryexec.Rung.
func (r *Rung) Name() string { return Name }

// Notes are what `dryexec doctor` says of the rung when it is available.
func (r *Rung) Notes() []string {
	return []string{
		"a trial runs on an APFS clone of its working directory under sandbox-exec: writes beneath the clone and a private tmp only, masked credentials and dryexec's state unreadable, the network only through netsim as its HTTP(S) proxy (a session's too, one netsim per session)",
		"a session's guest runs unconfined and starts each command under sandbox-exec with a profile that keeps it out of the baseline its diff is taken against; sessions fork by cloning the parent's workspace and baseline (processes are not carried)",
		"masked reads and direct connections are read from Seatbelt's reports (log stream), told apart from other sandboxes' by a random tag on each deny rule of the trial's or session's profile",
		"not enforced: limits (but the timeout)",
		"never run on a Mac: the profile, the clone walk, the trial's steps, netsim's proxy, a session's network and dirs, the reading of Seatbelt's reports and the darwin halves of the delta and of commit are tested on Linux only; clonefile, sandbox-exec, log stream and the rest are compiled for darwin, not run",
	}
}
