package host

import (
	"context"

	"github.com/dryexec/dryexec"
)

// Trial implements dryexec.Rung.
func (r *Rung) Trial(ctx context.Context, spec dryexec.TrialSpec) (*dryexec.StateDelta, error) {
	return nil, &dryexec.IsolationUnavailableError{Rung: Name, Missing: "one-shot trials (not yet)"}
}
