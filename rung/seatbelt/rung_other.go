//go:build !darwin

package seatbelt

import (
	"context"
	"runtime"

	"github.com/dryexec/dryexec"
)

// unavailable is the one answer outside macOS: Seatbelt is macOS's.
func unavailable() error {
	return &dryexec.IsolationUnavailableError{Rung: Name, Missing: NotHere}
}

// NotHere is why the seatbelt rung cannot run on this host.
const NotHere = "seatbelt is macOS's sandbox (sandbox-exec, with clonefile on APFS); this host runs " + runtime.GOOS

// Available implements dryexec.Rung: never, outside macOS.
func (r *Rung) Available(ctx context.Context) error { return unavailable() }

// Trial implements dryexec.Rung: never, outside macOS.
func (r *Rung) Trial(ctx context.Context, spec dryexec.TrialSpec) (*dryexec.StateDelta, error) {
	return nil, unavailable()
}
