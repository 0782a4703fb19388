package session

import (
	"context"
	"encoding/json"
	"testing"
	"time"
)

// The behaviours of sessions are tested against the public API, on every rung,
// in package conformance. What stays here needs the package's internals.

// openHost starts a host-rung session, closed when t ends.
func openHost(t *testing.T, opt Options) *Session {
	t.Helper()
	opt.Rung = "host"
	s, err := Open(testCtx(t), opt)
	if err != nil {
		t.Fatalf("opening a host session: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// testCtx bounds every call, so that a hang fails the test rather than the run.
func testCtx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

// jsonOf is v's JSON, for comparing decoded values.
func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
