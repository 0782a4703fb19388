package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/dryexec/dryexec/internal/guestexe"
	"github.com/dryexec/dryexec/internal/runflags"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/netsim/netproc"
)

// buildLocal builds the local engine as `make build` does (the
// dryexec_nocel tag: no CEL) into a directory of its own, with the guest
// and netsim's role beside it, and returns its path.
func buildLocal(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	goBuild(t, dir, map[string][]string{
		runflags.LocalName: {"-tags", "dryexec_nocel", "../../cmd/dryexec-local"},
		guestexe.Name:      {"../../cmd/dryexec-guest"},
		netproc.ExeName:    {"../../cmd/dryexec-netsim"},
	})
	return filepath.Join(dir, runflags.LocalName)
}

// goBuild builds each program of bins (its file name → the go build
// arguments after -o) into dir, statically, as `make build` does.
func goBuild(t *testing.T, dir string, bins map[string][]string) {
	t.Helper()
	goTool := testreq.NeedTool(t, "go")
	for out, args := range bins {
		build := exec.Command(goTool, append([]string{"build", "-o", filepath.Join(dir, out)}, args...)...)
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := build.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", out, err, b)
		}
	}
}

// engineProc is the engine as a process of its own: this test binary as
// the CLI (TestMain).
func engineProc() (string, []string) { return os.Args[0], []string{"DRYEXEC_TEST_AS_CLI=1"} }

// deltaShape is a delta's JSON without what differs between any two trials
// (shape) and without cgroup paths (a warning may name the one it could not
// make: the trial's, or its parent when no trial has made that yet).
func deltaShape(t *testing.T, doc string) string {
	t.Helper()
	b, err := json.Marshal(shape(t, doc))
	if err != nil {
		t.Fatal(err)
	}
	return cgroupPaths.ReplaceAllString(string(b), "CGROUP")
}

var cgroupPaths = regexp.MustCompile(`/sys/fs/cgroup/[^:"]*`)

// runProc runs bin with args in dir and exactly the variables vars.
func runProc(t *testing.T, bin, dir string, vars []string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir, cmd.Env = dir, vars
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	return code, out.String(), errb.String()
}

// TestLocalSameAsEngine: the same `run` invocations through the engine and
// through the local engine (cmd/dryexec-local, built without CEL) exit
// with the same code, print the same stdout and stderr (but for trial ids
// and figures) and store the same delta, whose receipt verifies; the local
// engine ran them itself (the engine it would hand them to does not
// exist). The decisions cover auto_commit, review (a delete, a sensitive
// path, a failure, a timeout) and block, so the policy without CEL is
// checked to decide as the engine's does.
func TestLocalSameAsEngine(t *testing.T) {
	requireNS(t)
	local := buildLocal(t)
	engine, engineVars := engineProc()
	dir := t.TempDir()
	writeFile(t, dir, "old.txt", "old\n")
	for _, tt := range []struct {
		name     string
		vars     []string
		args     []string
		wantCode int
	}{
		{"a file written", nil, []string{"-C", dir, "--", "sh", "-c", "echo hi; echo hi > x.txt"}, 0},
		{"no -C", nil, []string{"--", "sh", "-c", "echo hi > x.txt"}, 0},
		{"a failing command", nil, []string{"--", "sh", "-c", "echo oops >&2; exit 7"}, ExitCommandFailed},
		{"--exit-status command", nil, []string{"--exit-status", "command", "--", "sh", "-c", "exit 7"}, 7},
		{"--json --no-store", nil, []string{"--json", "--no-store", "--", "sh", "-c", "echo hi > x.txt"}, 0},
		{"--json, live output on stderr", nil, []string{"--json", "--", "sh", "-c", "echo out; echo x > x.txt"}, 0},
		{"--json, live stderr", nil, []string{"--json", "--", "sh", "-c", "echo err >&2"}, 0},
		{"--no-store", nil, []string{"--no-store", "-C", dir, "--", "sh", "-c", "echo x > x.txt"}, 0},
		{"-q --env --pass-env --timeout", []string{"LANG=C.UTF-8", "B=2"}, []string{"-q", "--env", "A=1", "--env", "LANG", "--pass-env", "B", "--timeout", "30s", "--", "sh", "-c", "echo $A $LANG $B > x.txt"}, 0},
		{"review: a delete", nil, []string{"-C", dir, "--", "rm", "old.txt"}, ExitReview},
		{"review: a sensitive path", nil, []string{"--", "sh", "-c", "echo K=1 > .env"}, ExitReview},
		{"block: /etc", nil, []string{"--", "sh", "-c", "echo x > /etc/dryexec-local-test"}, ExitBlock},
		{"timed out", nil, []string{"--timeout", "300ms", "--", "sleep", "30"}, ExitCommandFailed},
		{"--via=local", nil, []string{"--via=local", "-q", "--", "true"}, 0},
		{"DRYEXEC_VIA=local", []string{"DRYEXEC_VIA=local"}, []string{"--", "true"}, 0},
		{"DRYEXEC_VIA=auto", []string{"DRYEXEC_VIA=auto"}, []string{"--", "true"}, 0},
		{"usage: --exit-status", nil, []string{"--exit-status", "nope", "--", "true"}, ExitUsage},
		{"usage: -C not a directory", nil, []string{"-C", "/nonexistent", "--", "true"}, ExitUsage},
		{"usage: DRYEXEC_VIA", []string{"DRYEXEC_VIA=bad"}, []string{"--", "true"}, ExitUsage},
		{"usage: a negative --timeout", nil, []string{"--timeout", "-1s", "--", "true"}, ExitUsage},
		{"usage: an empty command", nil, []string{"--", ""}, ExitUsage},
		{"usage: DRYEXEC_TRIAL_TTL", []string{"DRYEXEC_TRIAL_TTL=soon"}, []string{"--", "true"}, ExitUsage},
		{"usage: --env", nil, []string{"--env", "=x", "--", "true"}, ExitUsage},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"run"}, tt.args...)
			base := append([]string{"PATH=/usr/bin:/bin", "NO_COLOR=1", "XDG_RUNTIME_DIR=" + t.TempDir()}, tt.vars...)
			lhome, ehome := t.TempDir(), t.TempDir()
			// The local engine hands what it does not take to this
			// engine, which does not exist: a run it handed over fails.
			lcode, lout, lerr := runProc(t, local, dir, append(base, "DRYEXEC_HOME="+lhome, "DRYEXEC_ENGINE=/nonexistent/dryexec-engine"), args...)
			ecode, eout, eerr := runProc(t, engine, dir, append(append(base, "DRYEXEC_HOME="+ehome), engineVars...), args...)
			if lcode != tt.wantCode || ecode != tt.wantCode {
				t.Fatalf("exit %d (local), %d (engine), want %d\nlocal stderr: %s\nengine stderr: %s", lcode, ecode, tt.wantCode, lerr, eerr)
			}
			sameOutput(t, args, "local", lout, lerr, "engine", eout, eerr)
			lids, eids := trialIDs.FindAllString(lout+lerr, 1), trialIDs.FindAllString(eout+eerr, 1)
			if tt.wantCode == ExitUsage || slices.Contains(args, "--no-store") {
				for _, h := range []string{lhome, ehome} {
					if _, out, _ := cli(t, h, "ls"); !strings.Contains(out, "store: 0 trials") {
						t.Errorf("a trial was stored:\n%s", out)
					}
				}
				return
			}
			if len(lids) == 0 || len(eids) == 0 {
				t.Fatalf("no trial id in the output:\nlocal: %s%s\nengine: %s%s", lout, lerr, eout, eerr)
			}
			_, lshow, _ := cli(t, lhome, "show", "--json", lids[0])
			_, eshow, _ := cli(t, ehome, "show", "--json", eids[0])
			if a, b := deltaShape(t, lshow), deltaShape(t, eshow); a != b {
				t.Errorf("the stored deltas differ:\nlocal: %s\nengine: %s", lshow, eshow)
			}
			if code, out, errs := cli(t, lhome, "verify", lids[0]); code != 0 {
				t.Errorf("the local engine's receipt does not verify: exit %d\n%s%s", code, out, errs)
			}
		})
	}
}

// TestLocalWithoutNetsim: the local engine does not link netsim's role
// (package netsim/netrole), so without a role binary (dryexec-netsim
// beside it, or $DRYEXEC_NETSIM) it takes no run: it hands even a run it
// would take to the engine, which plays the role itself, having written and
// stored nothing. With one named, it runs the trial itself. Started as the
// role all the same, it refuses, naming what to install.
func TestLocalWithoutNetsim(t *testing.T) {
	requireNS(t)
	dir := t.TempDir()
	goBuild(t, dir, map[string][]string{
		runflags.LocalName: {"-tags", "dryexec_nocel", "../../cmd/dryexec-local"},
		guestexe.Name:      {"../../cmd/dryexec-guest"},
	})
	local := filepath.Join(dir, runflags.LocalName)
	base := []string{"PATH=/usr/bin:/bin", "NO_COLOR=1", "XDG_RUNTIME_DIR=" + t.TempDir(), "DRYEXEC_ENGINE=/nonexistent/dryexec-engine"}
	args := []string{"run", "--", "sh", "-c", "echo hi > x.txt"}

	home := t.TempDir()
	code, out, errs := runProc(t, local, t.TempDir(), append(base, "DRYEXEC_HOME="+home), args...)
	if code != ExitInternal || out != "" || !strings.HasPrefix(errs, "dryexec: starting the engine /nonexistent/dryexec-engine") {
		t.Fatalf("no role binary: exit %d, stdout %q, stderr %q; want the hand-over to the engine", code, out, errs)
	}
	if ents, err := os.ReadDir(home); err != nil || len(ents) != 0 {
		t.Errorf("no role binary: the store was touched: %v %v", ents, err)
	}

	// The trial sends no packet, so the role binary named is never started.
	code, out, errs = runProc(t, local, t.TempDir(), append(base, "DRYEXEC_HOME="+t.TempDir(), netproc.ExeEnv+"=/nonexistent/dryexec-netsim"), args...)
	if code != 0 || !strings.Contains(out+errs, "x.txt") {
		t.Fatalf("a role binary named: exit %d, stdout %q, stderr %q; want the trial run here", code, out, errs)
	}

	code, out, errs = runProc(t, local, t.TempDir(), base, netproc.Role)
	if code != 2 || out != "" || !strings.Contains(errs, "does not play netsim's role") || !strings.Contains(errs, netproc.ExeName) {
		t.Fatalf("started as the role: exit %d, stdout %q, stderr %q; want a refusal naming %s", code, out, errs, netproc.ExeName)
	}
}

// TestLocalHandsOver: what the local engine does not take — another
// command, a flag it does not know, no `--`, --via daemon, a daemon that
// may answer — it hands to the engine (here one that does not exist, so
// the hand-over shows as its failure to start) having written nothing,
// stored nothing and run nothing.
func TestLocalHandsOver(t *testing.T) {
	requireNS(t)
	local := buildLocal(t)
	runtime := t.TempDir()
	l, err := net.Listen("unix", filepath.Join(runtime, "dryexec.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	dir := t.TempDir()
	for _, tt := range []struct {
		name string
		vars []string
		args []string
	}{
		{"ls", nil, []string{"ls"}},
		{"--help", nil, []string{"--help"}},
		{"run -h", nil, []string{"run", "-h", "--", "true"}},
		{"--rung", nil, []string{"run", "--rung", "host", "--", "true"}},
		{"--net", nil, []string{"run", "--net", "none", "--", "true"}},
		{"--pids", nil, []string{"run", "--pids", "64", "--", "true"}},
		{"no --", nil, []string{"run", "true"}},
		{"a word before --", nil, []string{"run", "-q", "true", "--", "true"}},
		{"no command", nil, []string{"run", "--"}},
		{"--via daemon", nil, []string{"run", "--via", "daemon", "--", "true"}},
		{"DRYEXEC_VIA=daemon", []string{"DRYEXEC_VIA=daemon"}, []string{"run", "--", "true"}},
		{"a daemon's socket", []string{"XDG_RUNTIME_DIR=" + runtime}, []string{"run", "--", "true"}},
		{"DRYEXEC_SOCKET", []string{"DRYEXEC_SOCKET=/nonexistent.sock"}, []string{"run", "--", "true"}},
		{"DRYEXEC_URL", []string{"DRYEXEC_URL=http://127.0.0.1:9"}, []string{"run", "--", "true"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			home := t.TempDir()
			vars := append([]string{"PATH=/usr/bin:/bin", "XDG_RUNTIME_DIR=" + t.TempDir(), "DRYEXEC_HOME=" + home,
				"DRYEXEC_ENGINE=/nonexistent/dryexec-engine"}, tt.vars...)
			code, out, errs := runProc(t, local, dir, vars, tt.args...)
			if code != ExitInternal || out != "" || !strings.HasPrefix(errs, "dryexec: starting the engine /nonexistent/dryexec-engine") {
				t.Fatalf("exit %d, stdout %q, stderr %q; want the hand-over to the engine", code, out, errs)
			}
			if ents, err := os.ReadDir(home); err != nil || len(ents) != 0 {
				t.Errorf("the store was touched: %v %v", ents, err)
			}
		})
	}
}
