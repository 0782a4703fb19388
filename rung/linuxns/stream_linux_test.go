package linuxns

import (
	"errors"
	"sync"
	"testing"

	"github.com/dryexec/dryexec"
)

// lineWriter records what it is given; fail makes every write fail.
type lineWriter struct {
	mu   sync.Mutex
	got  []byte
	fail bool
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.got = append(w.got, p...)
	if w.fail {
		return 0, errors.New("reader went away")
	}
	return len(p), nil
}

// TrialSpec.Stdout/Stderr see the live output; a failing live writer does not
// cut the delta's copy short.
func TestLiveOutput(t *testing.T) {
	requireNS(t)
	for _, fail := range []bool{false, true} {
		out, errw := &lineWriter{fail: fail}, &lineWriter{fail: fail}
		d := runTrial(t, t.TempDir(), dryexec.TrialSpec{Stdout: out, Stderr: errw}, "sh", "-c", "echo one; echo two >&2; echo three")
		if d.Process.Stdout != "one\nthree\n" || d.Process.Stderr != "two\n" {
			t.Fatalf("fail=%v: delta stdout %q stderr %q", fail, d.Process.Stdout, d.Process.Stderr)
		}
		if string(out.got) != "one\nthree\n" || string(errw.got) != "two\n" {
			t.Fatalf("fail=%v: live stdout %q stderr %q", fail, out.got, errw.got)
		}
	}
}
