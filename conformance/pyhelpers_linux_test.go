package conformance

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/dryexec/dryexec/session"
	"github.com/dryexec/dryexec/wire"
)

const pyTimeout = 60 * time.Second

// py runs code and fails the test if the call itself fails.
func py(t *testing.T, s *session.Session, code string, inputs map[string]wire.Value) *wire.PythonResult {
	t.Helper()
	r, err := s.Python(ctx(t), code, inputs, pyTimeout)
	if err != nil {
		t.Fatalf("Python(%q): %v", code, err)
	}
	if r.TimedOut {
		t.Fatalf("Python(%q) timed out:\n%s", code, r.Transcript)
	}
	return r
}

// pyOK runs code and requires it to succeed.
func pyOK(t *testing.T, s *session.Session, code string, inputs map[string]wire.Value) *wire.PythonResult {
	t.Helper()
	r := py(t, s, code, inputs)
	if !r.OK {
		t.Fatalf("Python(%q) failed: %+v\ntranscript:\n%s", code, r.Error, r.Transcript)
	}
	return r
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
