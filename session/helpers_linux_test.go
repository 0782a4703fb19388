package session

import (
	"context"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/dryexec/dryexec/rung/linuxns"
	"github.com/dryexec/dryexec/wire"
)

// These tests run every case on both rungs: CASE/host and CASE/ns (skipped,
// with the reason, where the kernel cannot provide namespaces).

var (
	nsOnce  sync.Once
	nsUnavl error
)

// opener starts a session on the rung under test, closed when t ends.
type opener = func(t *testing.T, opt Options) *Session

func forEachRung(t *testing.T, fn func(t *testing.T, open opener)) {
	t.Helper()
	for _, r := range []string{"host", "ns"} {
		t.Run(r, func(t *testing.T) {
			if r == "ns" {
				nsOnce.Do(func() { nsUnavl = (&linuxns.Rung{}).Available(context.Background()) })
				if nsUnavl != nil {
					t.Skipf("ns rung unavailable here: %v", nsUnavl)
				}
			}
			fn(t, func(t *testing.T, opt Options) *Session {
				t.Helper()
				opt.Rung = r
				s, err := Open(testCtx(t), opt)
				if err != nil {
					t.Fatalf("opening a %s session: %v", r, err)
				}
				t.Cleanup(func() { s.Close() })
				return s
			})
		})
	}
}

// testCtx bounds every call, so that a hang fails the test rather than the run.
func testCtx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

const pyTimeout = 60 * time.Second

// py runs code and fails the test if the call itself fails.
func py(t *testing.T, s *Session, code string, inputs map[string]wire.Value) *wire.PythonResult {
	t.Helper()
	r, err := s.Python(testCtx(t), code, inputs, pyTimeout)
	if err != nil {
		t.Fatalf("Python(%q): %v", code, err)
	}
	if r.TimedOut {
		t.Fatalf("Python(%q) timed out:\n%s", code, r.Transcript)
	}
	return r
}

// pyOK runs code and requires it to succeed.
func pyOK(t *testing.T, s *Session, code string, inputs map[string]wire.Value) *wire.PythonResult {
	t.Helper()
	r := py(t, s, code, inputs)
	if !r.OK {
		t.Fatalf("Python(%q) failed: %+v\ntranscript:\n%s", code, r.Error, r.Transcript)
	}
	return r
}

func sh(t *testing.T, s *Session, command string) string {
	t.Helper()
	r, err := s.Shell(testCtx(t), command, pyTimeout)
	if err != nil {
		t.Fatalf("Shell(%q): %v", command, err)
	}
	if r.ExitCode != 0 {
		t.Fatalf("Shell(%q): exit %d\n%s", command, r.ExitCode, r.Transcript)
	}
	return r.Stdout
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

// output is a json output's JSON text; it fails if the output is missing or not json.
func output(t *testing.T, r *wire.PythonResult, name string) string {
	t.Helper()
	v, ok := r.Outputs[name]
	if !ok {
		t.Fatalf("no output %q; outputs %v, skipped %v, error %+v", name, r.Outputs, r.OutputsSkipped, r.Error)
	}
	if v.Type != "json" {
		t.Fatalf("output %q is %s, want json", name, v.Type)
	}
	return jsonOf(t, v.JSON)
}
