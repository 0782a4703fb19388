package cli

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dryexec/dryexec/internal/front"
	"github.com/dryexec/dryexec/internal/runflags"
	"github.com/dryexec/dryexec/internal/smallfront"
	"github.com/dryexec/dryexec/netsim/netproc"
)

// smallFrontLayout installs what `make build` installs on linux/amd64 in a
// new directory: the small front as dryexec, the Go front, the engine, the
// local engine and netsim's role beside it. It returns the small front's
// path.
func smallFrontLayout(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	goBuild(t, dir, map[string][]string{smallfront.GoFrontName: {"../../cmd/dryexec-front"}, front.EngineName: {"../../cmd/dryexec"},
		runflags.LocalName: {"-tags", "dryexec_nocel", "../../cmd/dryexec-local"}, netproc.ExeName: {"../../cmd/dryexec-netsim"}})
	bin := filepath.Join(dir, "dryexec")
	if err := smallfront.Install(bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// runBin runs bin with args in dir as a user's shell would, with exactly
// the variables env.
func runBin(t *testing.T, bin, dir string, env []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir, cmd.Env = dir, env
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		return ee.ExitCode(), out.String(), errb.String()
	} else if err != nil {
		t.Fatal(err)
	}
	return 0, out.String(), errb.String()
}

// TestSmallFront: the small front (bin/dryexec on linux/amd64) hands a
// `run` to the daemon, which runs it as the Go front would (the same
// summary, live output, JSON delta and exit code as the Go front prints
// for the same call, checked side by side), and hands everything else —
// another command, no daemon, --via local, another store's daemon, a
// daemon without POST /v1/front, a usage error — to the Go front beside
// it, which then does what it always did.
func TestSmallFront(t *testing.T) {
	requireNS(t)
	bin := smallFrontLayout(t)
	goFront := filepath.Join(filepath.Dir(bin), smallfront.GoFrontName)
	home := t.TempDir()
	d := startTestDaemon(t, home)
	other := startTestDaemon(t, t.TempDir())
	old := oldDaemon(t)
	mute := muteDaemon(t)
	noDaemon := t.TempDir()
	for _, tt := range []struct {
		name      string
		runtime   string
		args      []string
		wantCode  int
		byDaemon  bool   // the daemon ran the trial
		same      bool   // the Go front prints the same for it
		wantOut   string // in stdout
		wantError string // in stderr
	}{
		{"a file written", d.runtime, []string{"run", "--", "sh", "-c", "echo hi; echo hi > x.txt"}, 0, true, true, "+ ", ""},
		{"live output, a failing command", d.runtime, []string{"run", "--", "sh", "-c", "echo out; echo oops >&2; exit 7"}, ExitCommandFailed, true, true, "out", "oops"},
		{"--exit-status command", d.runtime, []string{"run", "--exit-status", "command", "--", "sh", "-c", "exit 7"}, 7, true, true, "", ""},
		{"--json --no-store", d.runtime, []string{"run", "--json", "--no-store", "--", "sh", "-c", "echo hi > x.txt"}, 0, true, true, `"trial_id"`, ""},
		{"-q --env -C", d.runtime, []string{"run", "-q", "--env", "A=1", "-C", "sub", "--", "sh", "-c", "echo $A > y.txt"}, 0, true, true, "y.txt", ""},
		{"no daemon: the engine", noDaemon, []string{"run", "--json", "--", "true"}, 0, false, false, `"trial_id"`, ""},
		{"--via local: the engine", d.runtime, []string{"run", "--via", "local", "--json", "--", "true"}, 0, false, false, `"trial_id"`, ""},
		{"another store's daemon: the engine", other.runtime, []string{"run", "--json", "--", "true"}, 0, false, false, `"trial_id"`, ""},
		{"a daemon without /v1/front: the Go front, then the engine", old, []string{"run", "--json", "--", "true"}, 0, false, false, `"trial_id"`, ""},
		{"a daemon that never answers: the Go front, then the engine", mute, []string{"run", "--json", "--", "true"}, 0, false, false, `"trial_id"`, ""},
		{"an argument not UTF-8: the engine, bytes unchanged", d.runtime, []string{"run", "--", "sh", "-c", `printf "<%s>" "$1"`, "x", "caf\xe9"}, 0, false, false, "<caf\xe9>", ""},
		{"--help: the engine's", d.runtime, []string{"--help"}, 0, false, true, "Usage:", ""},
		{"a usage error: the engine's", d.runtime, []string{"run", "--exit-status", "nope", "--", "true"}, ExitUsage, false, true, "", "want decision"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			wd := t.TempDir()
			if err := os.Mkdir(filepath.Join(wd, "sub"), 0o755); err != nil {
				t.Fatal(err)
			}
			env := []string{"PATH=/usr/bin:/bin", "DRYEXEC_HOME=" + home, "XDG_RUNTIME_DIR=" + tt.runtime, "NO_COLOR=1"}
			before := d.log.String()
			code, out, errs := runBin(t, bin, wd, env, tt.args...)
			if code != tt.wantCode || !strings.Contains(out, tt.wantOut) || !strings.Contains(errs, tt.wantError) {
				t.Fatalf("exit %d, want %d; stdout %q (want %q); stderr %q (want %q)", code, tt.wantCode, out, tt.wantOut, errs, tt.wantError)
			}
			ids := trialIDs.FindAllString(out+errs, -1)
			if tt.byDaemon && (len(ids) == 0 || !d.ran(ids[0])) {
				t.Fatalf("the daemon did not run the trial (%v)\n%s%s", ids, out, errs)
			}
			if !tt.byDaemon && d.log.String() != before {
				t.Errorf("the daemon logged %s", strings.TrimPrefix(d.log.String(), before))
			}
			if !tt.same {
				return
			}
			gcode, gout, gerrs := runBin(t, goFront, wd, env, tt.args...)
			if gcode != code {
				t.Errorf("the Go front exits %d, the small front %d (%s)", gcode, code, gerrs)
			}
			if strings.Contains(strings.Join(tt.args, " "), "--json") {
				if a, b := shape(t, out), shape(t, gout); !reflect.DeepEqual(a, b) {
					t.Errorf("the deltas differ:\nsmall front: %s\nGo front: %s", out, gout)
				}
			} else if summaryShape(out) != summaryShape(gout) {
				t.Errorf("stdout differs:\nsmall front:\n%s\nGo front:\n%s", out, gout)
			}
			if summaryShape(errs) != summaryShape(gerrs) {
				t.Errorf("stderr differs:\nsmall front:\n%s\nGo front:\n%s", errs, gerrs)
			}
		})
	}
	t.Run("no Go front beside it", func(t *testing.T) {
		lone := filepath.Join(t.TempDir(), "dryexec")
		if err := smallfront.Install(lone); err != nil {
			t.Fatal(err)
		}
		code, _, errs := runBin(t, lone, t.TempDir(), []string{"DRYEXEC_HOME=" + home, "XDG_RUNTIME_DIR=" + noDaemon}, "ls")
		if code != ExitInternal || !strings.Contains(errs, "make build") {
			t.Fatalf("exit %d, stderr %q; want %d and how to install it", code, errs, ExitInternal)
		}
	})
}

// oldDaemon is a daemon of before POST /v1/front, as far as the fronts can
// tell: every request is answered 404. It returns its runtime dir.
func oldDaemon(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	l, err := net.Listen("unix", filepath.Join(dir, "dryexec.sock"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.NotFoundHandler()}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	return dir
}

// muteDaemon is a wedged daemon: its socket takes connections (the
// kernel's backlog) but nothing ever reads or answers them. It returns its
// runtime dir.
func muteDaemon(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	l, err := net.Listen("unix", filepath.Join(dir, "dryexec.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return dir
}

// TestSmallFrontSignals: Ctrl-C or SIGTERM to the small front while the
// trial runs reaches the daemon, which stops the trial and says so, as the
// Go front does: exit 130 or 143 and the note, and the daemon runs nothing
// after. The signal is sent once the command's output ("ready") arrived:
// the output is live.
func TestSmallFrontSignals(t *testing.T) {
	requireNS(t)
	bin := smallFrontLayout(t)
	home := t.TempDir()
	d := startTestDaemon(t, home)
	for _, tt := range []struct {
		sig  syscall.Signal
		name string
		code int
	}{{syscall.SIGINT, "SIGINT", ExitInterrupted}, {syscall.SIGTERM, "SIGTERM", ExitTerminated}} {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(bin, "run", "--", "sh", "-c", "echo ready; exec sleep 60")
			cmd.Dir = t.TempDir()
			cmd.Env = []string{"PATH=/usr/bin:/bin", "DRYEXEC_HOME=" + home, "XDG_RUNTIME_DIR=" + d.runtime, "NO_COLOR=1"}
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			var errb bytes.Buffer
			cmd.Stderr = &errb
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			r := bufio.NewReader(stdout)
			line, err := r.ReadString('\n')
			if err != nil || line != "ready\n" {
				cmd.Process.Kill()
				t.Fatalf("first line %q, %v", line, err)
			}
			start := time.Now()
			if err := cmd.Process.Signal(tt.sig); err != nil {
				t.Fatal(err)
			}
			io.Copy(io.Discard, r)
			err = cmd.Wait()
			if took := time.Since(start); took > 30*time.Second {
				t.Fatalf("the run went on %s after the signal", took)
			}
			ee, ok := err.(*exec.ExitError)
			if !ok || ee.ExitCode() != tt.code || !strings.Contains(errb.String(), "dryexec: interrupted ("+tt.name+"): trial tr_") ||
				!strings.Contains(errb.String(), "was stopped before it finished; nothing of it was kept") {
				t.Fatalf("%v, want exit %d; stderr %s", err, tt.code, errb.String())
			}
			if h := d.health(t, home); h.Running != 0 {
				t.Errorf("the daemon still runs %d trials", h.Running)
			}
		})
	}
}
