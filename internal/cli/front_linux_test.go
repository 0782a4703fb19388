package cli

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec/internal/front"
	"github.com/dryexec/dryexec/internal/testreq"
)

// frontWith runs the front (cmd/dryexec-front's fast path) as cliWith runs
// the engine: the same environment, the caller's variables listed for
// --env NAME*.
func frontWith(t *testing.T, home string, vars map[string]string, args ...string) (code int, handled bool, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	env := map[string]string{"DRYEXEC_HOME": home, "PATH": "/usr/local/bin:/usr/bin:/bin", "NO_COLOR": "1"}
	for k, v := range vars {
		env[k] = v
	}
	var environ []string
	for k, v := range env {
		environ = append(environ, k+"="+v)
	}
	code, handled = front.Run(context.Background(), args, front.Env{Stdout: &out, Stderr: &errb,
		Getenv: func(k string) string { return env[k] }, Environ: environ})
	return code, handled, out.String(), errb.String()
}

// sameOutput fails t unless two runs of args, a's and b's, printed the
// same: the delta (--json) or the summary on stdout, and stderr, but for
// what differs between any two trials.
func sameOutput(t *testing.T, args []string, a, aOut, aErr, b, bOut, bErr string) {
	t.Helper()
	if slices.Contains(args, "--json") {
		if x, y := shape(t, aOut), shape(t, bOut); !reflect.DeepEqual(x, y) {
			t.Errorf("the deltas differ:\n%s: %s\n%s: %s", a, aOut, b, bOut)
		}
	} else if summaryShape(aOut) != summaryShape(bOut) {
		t.Errorf("stdout differs:\n%s:\n%s\n%s:\n%s", a, aOut, b, bOut)
	}
	if summaryShape(aErr) != summaryShape(bErr) {
		t.Errorf("stderr differs:\n%s:\n%s\n%s:\n%s", a, aErr, b, bErr)
	}
}

// TestFrontSameAsEngine: a `run` the front handles goes to the daemon (its
// log records the trial) and prints what the engine prints for the same
// arguments — the summary, the live output, the JSON delta, the exit code —
// but for what differs between any two trials.
func TestFrontSameAsEngine(t *testing.T) {
	requireNS(t)
	home, dir := t.TempDir(), t.TempDir()
	d := startTestDaemon(t, home)
	for _, tt := range []struct {
		name     string
		args     []string
		wantCode int
	}{
		{"a file written", []string{"--", "sh", "-c", "echo hi; echo hi > x.txt"}, 0},
		{"a failing command", []string{"--", "sh", "-c", "echo oops >&2; exit 7"}, ExitCommandFailed},
		{"--exit-status command", []string{"--exit-status", "command", "--", "sh", "-c", "exit 7"}, 7},
		{"--json --no-store", []string{"--json", "--no-store", "--", "sh", "-c", "echo hi > x.txt"}, 0},
		{"-q --env --timeout", []string{"-q", "--env", "A=1", "--env", "LANG", "--timeout", "30s", "--", "sh", "-c", "echo $A $LANG > x.txt"}, 0},
		{"--via daemon", []string{"--via", "daemon", "--", "true"}, 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			vars := map[string]string{"XDG_RUNTIME_DIR": d.runtime, "LANG": "C.UTF-8"}
			args := append([]string{"run", "-C", dir}, tt.args...)
			code, handled, out, errs := frontWith(t, home, vars, args...)
			if !handled {
				t.Fatal("the front left the run to the engine")
			}
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d: %s", code, tt.wantCode, errs)
			}
			ids := trialIDs.FindAllString(out+errs, -1)
			if len(ids) == 0 || !d.ran(ids[0]) {
				t.Fatalf("the daemon did not run the trial (%v)\n%s%s", ids, out, errs)
			}
			ecode, eout, eerrs := cliWith(t, home, vars, args...)
			if ecode != code {
				t.Errorf("the engine exits %d, the front %d (%s)", ecode, code, eerrs)
			}
			sameOutput(t, args, "front", out, errs, "engine", eout, eerrs)
		})
	}
}

// TestFrontLeavesToEngine: what the front does not do exactly as the
// engine would is the engine's — no daemon of this install, --via local,
// a flag it does not know — and then it has written nothing and run nothing.
func TestFrontLeavesToEngine(t *testing.T) {
	requireNS(t)
	home := t.TempDir()
	d := startTestDaemon(t, home)
	other := startTestDaemon(t, t.TempDir())
	for _, tt := range []struct {
		name string
		vars map[string]string
		args []string
	}{
		{"no daemon", map[string]string{"XDG_RUNTIME_DIR": t.TempDir()}, []string{"run", "--", "true"}},
		{"no daemon, --via daemon (the engine refuses)", map[string]string{"XDG_RUNTIME_DIR": t.TempDir()}, []string{"run", "--via", "daemon", "--", "true"}},
		{"another store's daemon", map[string]string{"XDG_RUNTIME_DIR": other.runtime}, []string{"run", "--", "true"}},
		{"--via local", map[string]string{"XDG_RUNTIME_DIR": d.runtime}, []string{"run", "--via", "local", "--", "true"}},
		{"DRYEXEC_VIA=local", map[string]string{"XDG_RUNTIME_DIR": d.runtime, "DRYEXEC_VIA": "local"}, []string{"run", "--", "true"}},
		{"DRYEXEC_VIA=bad", map[string]string{"XDG_RUNTIME_DIR": d.runtime, "DRYEXEC_VIA": "bad"}, []string{"run", "--", "true"}},
		{"DRYEXEC_TRIAL_CONTENT_CAP", map[string]string{"XDG_RUNTIME_DIR": d.runtime, "DRYEXEC_TRIAL_CONTENT_CAP": "1K"}, []string{"run", "--", "true"}},
		{"--pids", map[string]string{"XDG_RUNTIME_DIR": d.runtime}, []string{"run", "--pids", "64", "--", "true"}},
		{"-C not a directory", map[string]string{"XDG_RUNTIME_DIR": d.runtime}, []string{"run", "-C", "/nonexistent", "--", "true"}},
		{"ls", map[string]string{"XDG_RUNTIME_DIR": d.runtime}, []string{"ls"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			before := d.log.String()
			_, handled, out, errs := frontWith(t, home, tt.vars, tt.args...)
			if handled || out != "" || errs != "" {
				t.Fatalf("handled %v, wrote %q %q; want the engine's", handled, out, errs)
			}
			if d.log.String() != before {
				t.Errorf("the daemon logged %s", strings.TrimPrefix(d.log.String(), before))
			}
		})
	}
}

// TestFrontBinary: the layout `make build` installs — the front as dryexec,
// the engine beside it — as a user's shell runs it: what the front does not
// handle reaches the engine with its arguments and exit code (--help, a
// trial without a daemon, a usage error), a trial through the daemon is the
// daemon's, and a front without its engine says how to get one.
func TestFrontBinary(t *testing.T) {
	requireNS(t)
	goTool := testreq.NeedTool(t, "go")
	dir := t.TempDir()
	for out, pkg := range map[string]string{"dryexec": "../../cmd/dryexec-front", front.EngineName: "../../cmd/dryexec"} {
		build := exec.Command(goTool, "build", "-o", filepath.Join(dir, out), pkg)
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := build.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", pkg, err, b)
		}
	}
	lone := filepath.Join(t.TempDir(), "dryexec")
	if b, err := os.ReadFile(filepath.Join(dir, "dryexec")); err != nil || os.WriteFile(lone, b, 0o755) != nil {
		t.Fatalf("copying the front: %v", err)
	}
	home := t.TempDir()
	d := startTestDaemon(t, home)
	noDaemon := t.TempDir()
	for _, tt := range []struct {
		name      string
		bin       string
		runtime   string
		args      []string
		wantCode  int
		wantOut   string
		byDaemon  bool
		wantError string
	}{
		{"--help, the engine's", filepath.Join(dir, "dryexec"), noDaemon, []string{"--help"}, 0, "Usage:", false, ""},
		{"no daemon: the engine runs it", filepath.Join(dir, "dryexec"), noDaemon, []string{"run", "--json", "--", "true"}, 0, `"trial_id"`, false, ""},
		{"a usage error, the engine's", filepath.Join(dir, "dryexec"), noDaemon, []string{"run", "--exit-status", "nope", "--", "true"}, ExitUsage, "", false, "want decision"},
		{"through the daemon", filepath.Join(dir, "dryexec"), d.runtime, []string{"run", "--json", "--", "true"}, 0, `"trial_id"`, true, ""},
		{"no engine beside it", lone, noDaemon, []string{"run", "--", "true"}, ExitInternal, "", false, "make build"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(tt.bin, tt.args...)
			cmd.Dir = t.TempDir()
			cmd.Env = []string{"PATH=/usr/bin:/bin", "DRYEXEC_HOME=" + home, "XDG_RUNTIME_DIR=" + tt.runtime, "NO_COLOR=1"}
			var stdout, stderr bytes.Buffer
			cmd.Stdout, cmd.Stderr = &stdout, &stderr
			err := cmd.Run()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			if code != tt.wantCode || !strings.Contains(stdout.String(), tt.wantOut) || !strings.Contains(stderr.String(), tt.wantError) {
				t.Fatalf("exit %d, want %d; stdout %q (want %q); stderr %q (want %q)", code, tt.wantCode, stdout.String(), tt.wantOut, stderr.String(), tt.wantError)
			}
			if strings.Contains(tt.wantOut, "trial_id") {
				if id := decode(t, stdout.String()).TrialID; d.ran(id) != tt.byDaemon {
					t.Errorf("the daemon ran %s: %v, want %v", id, d.ran(id), tt.byDaemon)
				}
			}
		})
	}
}

// TestFrontLiveAndInterrupt: through the front, the command's output
// arrives while it runs (the writer below interrupts the run, as Ctrl-C
// does, when it sees "ready"; only live output ends the run before the
// command's minute), and the interrupted run says what became of the trial
// and exits 130, as the engine does.
func TestFrontLiveAndInterrupt(t *testing.T) {
	requireNS(t)
	home := t.TempDir()
	d := startTestDaemon(t, home)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	out := &cancelOn{marker: "ready", cancel: func() { cancel(errors.New("interrupt signal received")) }}
	var errb bytes.Buffer
	vars := map[string]string{"DRYEXEC_HOME": home, "XDG_RUNTIME_DIR": d.runtime, "PATH": "/usr/bin:/bin"}
	start := time.Now()
	code, handled := front.Run(ctx, []string{"run", "-C", t.TempDir(), "--", "sh", "-c", "echo ready; exec sleep 60"},
		front.Env{Stdout: out, Stderr: &errb, Getenv: func(k string) string { return vars[k] }})
	if took := time.Since(start); took > 50*time.Second {
		t.Fatalf("the run took %s: the output was not live", took)
	}
	if !handled || code != ExitInterrupted || !strings.Contains(errb.String(), "dryexec: interrupted (SIGINT): trial tr_") ||
		!strings.Contains(errb.String(), "was stopped before it finished; nothing of it was kept") {
		t.Fatalf("handled %v, exit %d, want %d; stderr %s", handled, code, ExitInterrupted, errb.String())
	}
}
