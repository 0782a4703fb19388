package session

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dryexec/dryexec/internal/testreq"
)

// The pre-started python runner (guest/python_prestart_unix.go). A runner's
// pid tells which runner served a call: pids grow, so a call whose pid is lower
// than that of a shell exec run between the two calls was served by a runner
// started before that shell, i.e. the pre-started one.

var prestartRungs = []string{"host", "ns"}

// openRung starts a session on rung, closed when t ends.
func openRung(t *testing.T, rung string, opt Options) *Session {
	t.Helper()
	opt.Rung = rung
	s, err := Open(testCtx(t), opt)
	if err != nil {
		t.Fatalf("opening a %s session: %v", rung, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// pyOut runs code, requires it to succeed, and returns its json outputs as
// their JSON text.
func pyOut(t *testing.T, s *Session, code string) map[string]string {
	t.Helper()
	r, err := s.Python(testCtx(t), code, nil, time.Minute)
	if err != nil {
		t.Fatalf("Python(%q): %v", code, err)
	}
	if !r.OK {
		t.Fatalf("Python(%q) failed: %+v\n%s", code, r.Error, r.Transcript)
	}
	out := map[string]string{}
	for k, v := range r.Outputs {
		out[k] = jsonOf(t, v.JSON)
	}
	return out
}

// pyPID runs code followed by binding pid, and returns the outputs and the pid.
func pyPID(t *testing.T, s *Session, code string) (map[string]string, int) {
	t.Helper()
	out := pyOut(t, s, code+"\nimport os as _os\npid = _os.getpid()")
	pid, err := strconv.Atoi(out["pid"])
	if err != nil {
		t.Fatalf("pid output %q", out["pid"])
	}
	return out, pid
}

// sh runs a shell command that must succeed and returns its stdout.
func sh(t *testing.T, s *Session, cmd string) string {
	t.Helper()
	r, err := s.Shell(testCtx(t), cmd, time.Minute)
	if err != nil {
		t.Fatalf("Shell(%q): %v", cmd, err)
	}
	if r.ExitCode != 0 {
		t.Fatalf("Shell(%q): exit %d\n%s", cmd, r.ExitCode, r.Transcript)
	}
	return r.Stdout
}

// shellPID runs a shell and returns its pid.
func shellPID(t *testing.T, s *Session) int {
	t.Helper()
	out := sh(t, s, "echo $$")
	pid, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		t.Fatalf("echo $$: %q", out)
	}
	return pid
}

// TestPythonPrestartServesNextCall is the positive control of the tests below:
// with nothing changed between two calls, the second is served by the runner
// pre-started after the first, a different process.
func TestPythonPrestartServesNextCall(t *testing.T) {
	for _, rung := range prestartRungs {
		t.Run(rung, func(t *testing.T) {
			s := openRung(t, rung, Options{})
			sh(t, s, "true") // the shell's first exec exports PWD and OLDPWD
			_, p1 := pyPID(t, s, "")
			between := shellPID(t, s)
			_, p2 := pyPID(t, s, "")
			if p2 == p1 {
				t.Fatalf("two calls were served by one runner (pid %d)", p1)
			}
			if p2 > between {
				t.Errorf("the second call's runner (pid %d) started after the shell between the calls (pid %d): it was not pre-started", p2, between)
			}
			// Fresh: started for the call, after the shell.
			between = shellPID(t, s)
			r, err := s.PythonWith(testCtx(t), "import os\npid = os.getpid()", nil, PythonOptions{Fresh: true})
			if err != nil || !r.OK {
				t.Fatalf("Fresh call: %v %+v", err, r)
			}
			if p3, _ := strconv.Atoi(jsonOf(t, r.Outputs["pid"].JSON)); p3 < between {
				t.Errorf("a Fresh call was served by a runner (pid %d) started before the shell (pid %d)", p3, between)
			}
		})
	}
}

// TestPythonPrestartNoStateCarriesOver: a runner serves one call; what a call
// changes in its interpreter is gone in the next.
func TestPythonPrestartNoStateCarriesOver(t *testing.T) {
	for _, rung := range prestartRungs {
		t.Run(rung, func(t *testing.T) {
			s := openRung(t, rung, Options{})
			_, p1 := pyPID(t, s, `import json, sys, builtins
G = 5
json.dx_mark = 1
sys.modules["dx_fake"] = json
builtins.dx_builtin = 1
sys.path.append("/dx_added")
f = open("/proc/self/status")`)
			out, p2 := pyPID(t, s, `import json, sys, builtins
seen = [name for name, there in [
    ("global", "G" in globals()),
    ("module attribute", hasattr(json, "dx_mark")),
    ("sys.modules entry", "dx_fake" in sys.modules),
    ("builtin", hasattr(builtins, "dx_builtin")),
    ("sys.path entry", "/dx_added" in sys.path),
] if there]`)
			if p1 == p2 {
				t.Errorf("two calls were served by one runner (pid %d)", p1)
			}
			if out["seen"] != "[]" {
				t.Errorf("the second call saw the first call's %s", out["seen"])
			}
		})
	}
}

// TestPythonPrestartEnvChange: the runner reads its environment at startup; a
// call made after the shell exported, changed or removed a variable must see
// the new environment, so the pre-started runner is not used.
func TestPythonPrestartEnvChange(t *testing.T) {
	cases := []struct {
		name, shell, check string
	}{
		{"new_variable", "export DX_FOO=bar", `ok = os.environ.get("DX_FOO") == "bar"`},
		{"changed_variable", "export DX_FOO=baz", `ok = os.environ.get("DX_FOO") == "baz"`},
		{"removed_variable", "unset DX_FOO", `ok = "DX_FOO" not in os.environ`},
		{"pythonhashseed", "export PYTHONHASHSEED=0", `ok = sys.flags.hash_randomization == 0`},
		{"pythonpath", "export PYTHONPATH=/dx_pp", `ok = "/dx_pp" in sys.path`},
		{"pythonoptimize", "export PYTHONOPTIMIZE=1", `ok = sys.flags.optimize == 1`},
	}
	for _, rung := range prestartRungs {
		t.Run(rung, func(t *testing.T) {
			s := openRung(t, rung, Options{})
			for _, tc := range cases {
				pyOut(t, s, "")
				sh(t, s, tc.shell)
				out := pyOut(t, s, "import os, sys\n"+tc.check)
				if out["ok"] != "true" {
					t.Errorf("%s: after `%s` the next call does not see it", tc.name, tc.shell)
				}
			}
		})
	}
}

// TestPythonPrestartCwd: the call runs in the shell's cwd (not where the
// runner was started) and imports from it, as `python -c` does.
func TestPythonPrestartCwd(t *testing.T) {
	for _, rung := range prestartRungs {
		t.Run(rung, func(t *testing.T) {
			s := openRung(t, rung, Options{})
			pyOut(t, s, "")
			dir := strings.TrimSpace(sh(t, s, "mkdir -p sub && cd sub && printf 'V = 7\\n' > dxmod.py && pwd -P"))
			out := pyOut(t, s, "import os, dxmod\ncwd = os.getcwd()\nv = dxmod.V")
			if out["cwd"] != strconv.Quote(dir) || out["v"] != "7" {
				t.Errorf("cwd %s, dxmod.V %s; want %q, 7", out["cwd"], out["v"], dir)
			}
		})
	}
}

// TestPythonPrestartAfterCd: a `cd` changes only PWD and OLDPWD, which no
// startup reads: the call after it is still served by the pre-started
// runner, and sees the shell's values of both.
func TestPythonPrestartAfterCd(t *testing.T) {
	for _, rung := range prestartRungs {
		t.Run(rung, func(t *testing.T) {
			s := openRung(t, rung, Options{})
			sh(t, s, "true")
			pyOut(t, s, "")
			between := shellPID(t, s)
			dir := strings.TrimSpace(sh(t, s, "mkdir -p sub2 && cd sub2 && pwd"))
			out, p := pyPID(t, s, "import os\npwd = os.environ.get('PWD')\noldpwd = os.environ.get('OLDPWD')\ncwd = os.getcwd()")
			if p > between {
				t.Errorf("the call after a cd was not served by the pre-started runner (pid %d > the shell's %d)", p, between)
			}
			if out["pwd"] != strconv.Quote(dir) || out["cwd"] != strconv.Quote(dir) || out["oldpwd"] == strconv.Quote(dir) || out["oldpwd"] == "null" {
				t.Errorf("after cd %s: PWD %s, OLDPWD %s, cwd %s", dir, out["pwd"], out["oldpwd"], out["cwd"])
			}
		})
	}
}

// TestPythonPrestartRelativePythonPath: a relative PYTHONPATH entry is
// resolved against the cwd at startup, so it must be the shell's cwd.
func TestPythonPrestartRelativePythonPath(t *testing.T) {
	for _, rung := range prestartRungs {
		t.Run(rung, func(t *testing.T) {
			s := openRung(t, rung, Options{})
			sh(t, s, "mkdir -p a/lib && printf 'W = 3\\n' > a/lib/dxrel.py && cd a && export PYTHONPATH=lib")
			pyOut(t, s, "")
			out := pyOut(t, s, "import os\nos.chdir('/')\nimport dxrel\nw = dxrel.W")
			if out["w"] != "3" {
				t.Errorf("dxrel.W = %s, want 3", out["w"])
			}
		})
	}
}

// TestPythonPrestartStartupFilesChange: a file or directory the interpreter's
// startup read (here: the user site directory, created after the runner
// started, with a .pth file in it) changed, so the runner started before is not
// used.
func TestPythonPrestartStartupFilesChange(t *testing.T) {
	for _, rung := range prestartRungs {
		t.Run(rung, func(t *testing.T) {
			mark := markEnv(t)
			s := openRung(t, rung, Options{Env: mark})
			sh(t, s, "export PYTHONUSERBASE=$PWD/ub && mkdir extra")
			out := pyOut(t, s, "import site\nus = site.getusersitepackages()\nen = site.ENABLE_USER_SITE\nimport os\nextra = os.path.abspath('extra')")
			if out["en"] != "true" {
				testreq.Needf(t, testreq.Python, "user site directories", fmt.Errorf("disabled here (%s)", out["en"]))
			}
			us, extra := unquote(t, out["us"]), unquote(t, out["extra"])
			// The next call's runner has run its startup: it did not see
			// what comes now.
			waitWaiting(t, waitingRunner(t, s, mark))
			sh(t, s, fmt.Sprintf("mkdir -p %s && echo %s > %s/dx.pth", us, extra, us))
			out = pyOut(t, s, fmt.Sprintf("import sys\nfound = %q in sys.path", extra))
			if out["found"] != "true" {
				t.Errorf("a .pth file added in the user site directory is not seen by the next call")
			}
		})
	}
}

func unquote(t *testing.T, s string) string {
	t.Helper()
	u, err := strconv.Unquote(s)
	if err != nil {
		t.Fatalf("%s: %v", s, err)
	}
	return u
}

// TestPythonPrestartNotTheShellsJob: the waiting runner is in no process group
// of the shell's: a shell killing its own group leaves it be, and it still
// serves the next call.
func TestPythonPrestartNotTheShellsJob(t *testing.T) {
	for _, rung := range prestartRungs {
		t.Run(rung, func(t *testing.T) {
			s := openRung(t, rung, Options{})
			sh(t, s, "true")
			pyOut(t, s, "")
			if r, err := s.Shell(testCtx(t), "jobs; kill -KILL 0", time.Minute); err != nil || r.Stdout != "" {
				t.Fatalf("jobs: %q, %v", r.Stdout, err)
			}
			between := shellPID(t, s)
			if _, p := pyPID(t, s, ""); p > between {
				t.Errorf("the pre-started runner did not survive its shell's `kill 0` (the call's pid %d > the shell's %d)", p, between)
			}
		})
	}
}

// TestPythonPrestartTimeout: a call's timeout counts from the call, also while
// the pre-started runner is still starting; it kills that runner and the
// session lives on.
func TestPythonPrestartTimeout(t *testing.T) {
	for _, rung := range prestartRungs {
		t.Run(rung, func(t *testing.T) {
			s := openRung(t, rung, Options{})
			pyOut(t, s, "")
			// Right after the call: its successor may not even be ready.
			r, err := s.Python(testCtx(t), "print('before', flush=True)\nwhile True: pass", nil, time.Millisecond)
			if err != nil {
				t.Fatal(err)
			}
			if !r.TimedOut || r.OK || r.Error == nil || r.Error.Type != "TimeoutError" {
				t.Fatalf("a 1ms call: timed out %v, ok %v, error %+v", r.TimedOut, r.OK, r.Error)
			}
			r, err = s.Python(testCtx(t), "print('before', flush=True)\nwhile True: pass", nil, 2*time.Second)
			if err != nil {
				t.Fatal(err)
			}
			if !r.TimedOut || r.Transcript != "before\n" {
				t.Fatalf("a looping call: timed out %v, transcript %q", r.TimedOut, r.Transcript)
			}
			pyOut(t, s, "")
		})
	}
}

// TestPythonPrestartRunnerKilled: a waiting runner killed from outside (by a
// command, say) is not used: the call starts a fresh one.
func TestPythonPrestartRunnerKilled(t *testing.T) {
	for _, rung := range prestartRungs {
		t.Run(rung, func(t *testing.T) {
			mark := markEnv(t)
			s := openRung(t, rung, Options{Env: mark})
			pyOut(t, s, "")
			pid := waitingRunner(t, s, mark)
			waitWaiting(t, pid)
			syscall.Kill(pid, syscall.SIGKILL)
			waitGone(t, pid)
			pyOut(t, s, "")
		})
	}
}

// TestPythonPrestartLifecycle: reset and push_tree replace the waiting runner,
// close leaves none behind.
func TestPythonPrestartLifecycle(t *testing.T) {
	for _, rung := range prestartRungs {
		t.Run(rung, func(t *testing.T) {
			mark := markEnv(t)
			// PythonWarm: a runner waits from the start (without it, only
			// from the first exec_python on: TestConformance/values).
			s, err := Open(testCtx(t), Options{Rung: rung, Env: mark, PythonWarm: true})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			waiting := func(when string) int {
				t.Helper()
				t.Log(when)
				return waitingRunner(t, s, mark)
			}
			p := waiting("at start")
			pyOut(t, s, "")
			p, q := waiting("after a call"), p
			if p == q {
				t.Fatalf("the runner started at open (pid %d) still waits after serving a call", p)
			}
			if err := s.Reset(testCtx(t)); err != nil {
				t.Fatal(err)
			}
			p, q = waiting("after reset"), p
			if p == q {
				t.Errorf("reset kept the waiting runner (pid %d)", p)
			}
			if err := s.PushDir(testCtx(t), t.TempDir()); err != nil {
				t.Fatal(err)
			}
			if p2 := waiting("after push"); p2 == p {
				t.Errorf("push_tree kept the waiting runner (pid %d)", p)
			}
			s.Close()
			if pids := runners(t, mark); len(pids) != 0 {
				t.Errorf("runners left after close: %v", pids)
			}
		})
	}
}

// TestPythonPrestartNoDiff: neither the waiting runner nor the runs leave
// anything in the workspace (no __pycache__ of a module imported from it).
func TestPythonPrestartNoDiff(t *testing.T) {
	for _, rung := range prestartRungs {
		t.Run(rung, func(t *testing.T) {
			s := openRung(t, rung, Options{})
			sh(t, s, "mkdir -p lib && printf 'X = 1\\n' > dxm.py && printf 'Y = 2\\n' > lib/dxl.py && export PYTHONPATH=$PWD/lib")
			if _, err := s.Diff(testCtx(t), true); err != nil {
				t.Fatal(err)
			}
			pyOut(t, s, "")
			pyOut(t, s, "import dxm, dxl")
			pyOut(t, s, "import dxm, dxl")
			d, err := s.Diff(testCtx(t), false)
			if err != nil {
				t.Fatal(err)
			}
			if len(d.Writes)+len(d.Links)+len(d.Deletes)+len(d.Modes) != 0 {
				t.Errorf("python left changes: writes %v, links %v, deletes %v, modes %v", mapKeys(d.Writes), d.Links, d.Deletes, d.Modes)
			}
		})
	}
}

func mapKeys[V any](m map[string]V) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	slices.Sort(ks)
	return ks
}

// markEnv is a session environment with a variable unique to the test, by which
// its processes are found.
func markEnv(t *testing.T) map[string]string {
	return map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp",
		"DX_TEST_MARK": fmt.Sprintf("%s-%d-%d", t.Name(), os.Getpid(), time.Now().UnixNano())}
}

// waitingRunner returns the pid of s's waiting runner. A ping first: the
// guest starts a runner in the background, but before the next request.
func waitingRunner(t *testing.T, s *Session, mark map[string]string) int {
	t.Helper()
	if _, err := s.Ping(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	// The fork is done by then, but the runner may still be on its way to
	// python (the guest's child is not dumpable until it execs, and it
	// first execs the exec trampoline): its environ is unreadable until
	// then, so it is looked for until it shows.
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := runners(t, mark)
		if len(pids) == 1 {
			return pids[0]
		}
		if len(pids) > 1 || time.Now().After(deadline) {
			t.Fatalf("%d waiting runners (%v), want 1", len(pids), pids)
		}
		time.Sleep(time.Millisecond)
	}
}

// runners lists the live (not zombie) python runners carrying mark.
func runners(t *testing.T, mark map[string]string) []int {
	t.Helper()
	want := []byte("DX_TEST_MARK=" + mark["DX_TEST_MARK"] + "\x00")
	procs, _ := filepath.Glob("/proc/[0-9]*")
	var pids []int
	for _, p := range procs {
		cmdline, err := os.ReadFile(p + "/cmdline")
		if err != nil || !bytes.Contains(cmdline, []byte("\x00-B\x00-u\x00-c\x00# dryexec exec_python runner")) {
			continue
		}
		env, err := os.ReadFile(p + "/environ")
		if err != nil || !bytes.Contains(env, want) {
			continue
		}
		if stat, err := os.ReadFile(p + "/stat"); err != nil || bytes.Contains(stat, []byte(") Z ")) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(p))
		pids = append(pids, pid)
	}
	slices.Sort(pids)
	return pids
}

// waitWaiting waits until the runner pid is ready: blocked in read(4, …), on
// its request pipe.
func waitWaiting(t *testing.T, pid int) {
	t.Helper()
	ctx := testCtx(t)
	for {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/syscall", pid))
		if err != nil {
			t.Fatalf("runner %d: %v", pid, err)
		}
		if strings.HasPrefix(string(b), "0 0x4 ") {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("runner %d never waited on its request pipe (%s)", pid, b)
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// waitGone waits until pid is reaped.
func waitGone(t *testing.T, pid int) {
	t.Helper()
	ctx := testCtx(t)
	for {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err != nil {
			return
		}
		select {
		case <-ctx.Done():
			t.Fatalf("pid %d is still there", pid)
		case <-time.After(5 * time.Millisecond):
		}
	}
}
