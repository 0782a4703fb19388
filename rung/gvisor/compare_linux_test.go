package gvisor_test

import (
	"context"
	"testing"

	"github.com/dryexec/dryexec/internal/rungcompare"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/rung/gvisor"
	"github.com/dryexec/dryexec/rung/linuxns"
)

// TestSameDeltaAsNS runs the same commands through `dryexec run --rung ns`
// and `--rung gvisor` in the same directory and requires the same delta,
// field by field (timing aside): rungcompare.SameDeltaAsNS, every case.
func TestSameDeltaAsNS(t *testing.T) {
	requireBoth(t)
	rungcompare.SameDeltaAsNS(t, gvisor.Name, rungcompare.Cases())
}

// requireBoth skips unless both rungs run here (fails where gvisor is
// required and missing).
func requireBoth(t testing.TB) {
	t.Helper()
	testreq.Need(t, testreq.NS, (&linuxns.Rung{}).Available(context.Background()))
	testreq.Need(t, testreq.GVisor, (&gvisor.Rung{}).Available(context.Background()))
}

// TestSessionSameAsNS runs the same sessions (a pushed workspace, then
// commands, each followed by a diff) on ns and on gvisor and requires the
// same results, diffs, violations and network log, field by field (timing
// aside): rungcompare.SessionSameAsNS, every case.
func TestSessionSameAsNS(t *testing.T) {
	requireBoth(t)
	rungcompare.SessionSameAsNS(t, gvisor.Name, rungcompare.SessionCases())
}
