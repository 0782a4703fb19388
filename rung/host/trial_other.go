//go:build !linux

package host

import (
	"context"

	"github.com/dryexec/dryexec"
)

// Trial implements dryexec.Rung: outside Linux this build has no copy of
// the working directory (copy_linux.go), so only sessions run here.
func (r *Rung) Trial(ctx context.Context, spec dryexec.TrialSpec) (*dryexec.StateDelta, error) {
	return nil, &dryexec.IsolationUnavailableError{Rung: Name, Missing: "one-shot trials on the host rung need Linux in this build (sessions work)"}
}
