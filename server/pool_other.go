//go:build !linux

package server

import (
	"context"

	"github.com/dryexec/dryexec"
)

// newPool: the warm pool is the ns rung's, Linux only.
func newPool(ctx context.Context, cfg Config, template dryexec.TrialSpec) (trialPool, error) {
	return nil, &dryexec.IsolationUnavailableError{Rung: "ns", Missing: "Linux"}
}

func poolStats(p trialPool) any { return nil }

func nsAvailable(ctx context.Context) error {
	return &dryexec.IsolationUnavailableError{Rung: "ns", Missing: "Linux"}
}
