package session

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/rootless"
	"github.com/dryexec/dryexec/internal/testreq"
)

// TestRootlessForkBomb: under the rlimit fallback (rootless, no cgroup), a
// session's execs get RLIMIT_NPROC = the pids limit and the guest keeps its
// headroom above it, so a fork bomb in exec_shell and one in exec_python are
// refused forks, the guest lives on, and the next execs work. With one shared
// limit the bomb could take the guest's last thread and end the session. Run
// as root, it re-runs itself as nobody.
func TestRootlessForkBomb(t *testing.T) {
	if os.Getuid() == 0 {
		rootless.Rerun(t, "^TestRootlessForkBomb$", 3*time.Minute)
		return
	}
	const pids = 64
	// testCtx is the outer bound: the bombs stop at the rlimit, at their
	// exec's timeout, and at the latest when the test's context ends.
	ctx := testCtx(t)
	// sh (dash): its ulimit -p is the process limit (bash's is the pipe
	// size, its process limit -u).
	s, err := Open(ctx, Options{Rung: "ns", Net: []string{"none"}, NetCADir: filepath.Join(t.TempDir(), "ca"),
		Limits: dryexec.Limits{Pids: pids}, Shell: "sh",
		Env: map[string]string{"PATH": "/usr/bin:/bin"}})
	if err != nil {
		if errors.As(err, new(*dryexec.IsolationUnavailableError)) {
			testreq.Need(t, testreq.NS, err)
		}
		t.Fatal(err)
	}
	defer s.Close()
	if w := strings.Join(s.Warnings(), "\n"); !strings.Contains(w, "rlimits") {
		t.Skipf("not the rlimit fallback here (warnings %q)", w)
	}
	sh := func(cmd string, timeout time.Duration) string {
		t.Helper()
		r, err := s.Shell(ctx, cmd, timeout)
		if err != nil {
			t.Fatalf("%q: %v (the session died?)", cmd, err)
		}
		return r.Stdout
	}
	// The exec's own limit is the pids limit, not the guest's.
	if got := sh("ulimit -p", time.Minute); got != strconv.Itoa(pids)+"\n" {
		t.Errorf("ulimit -p in an exec: %q, want %d", got, pids)
	}
	// The shell then becomes a sleep (no fork needed): the bomb goes on
	// until the exec's timeout kills its group.
	for i := 0; i < 2; i++ {
		r, err := s.Shell(ctx, `b() { b | b & }; b 2>/dev/null; exec sleep 60`, 3*time.Second)
		if err != nil {
			t.Fatalf("the shell bomb: %v (the session died?)", err)
		}
		if !r.TimedOut {
			t.Errorf("the shell bomb ended before its timeout: exit %d, stderr %.200q", r.ExitCode, r.Stderr)
		}
		if got := sh("echo alive", time.Minute); got != "alive\n" {
			t.Fatalf("after the shell bomb: %q", got)
		}
	}
	testreq.NeedPython(t)
	// The runner forks until refused; the children sleep (and are killed
	// with the runner's group when the exec ends), so they all count.
	bomb := `import os, resource, time
limit = resource.getrlimit(resource.RLIMIT_NPROC)[0]
forks, refused = 0, ""
try:
    while forks < 1000:
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        forks += 1
except OSError as e:
    refused = type(e).__name__`
	for i := 0; i < 2; i++ {
		r, err := s.Python(ctx, bomb, nil, 30*time.Second)
		if err != nil {
			t.Fatalf("the python bomb: %v (the session died?)", err)
		}
		if !r.OK {
			t.Fatalf("the python bomb: %+v", r.Error)
		}
		if got := jsonOf(t, r.Outputs["limit"].JSON); got != strconv.Itoa(pids) {
			t.Errorf("the runner's RLIMIT_NPROC: %s, want %d", got, pids)
		}
		forks, _ := strconv.Atoi(jsonOf(t, r.Outputs["forks"].JSON))
		if refused := jsonOf(t, r.Outputs["refused"].JSON); refused != `"BlockingIOError"` || forks >= pids {
			t.Errorf("the python bomb forked %d times, then %s: want fewer than %d, then BlockingIOError", forks, refused, pids)
		}
		r, err = s.Python(ctx, "x = 6 * 7", nil, time.Minute)
		if err != nil || !r.OK || jsonOf(t, r.Outputs["x"].JSON) != "42" {
			t.Fatalf("after the python bomb: %v %+v", err, r)
		}
	}
	if got := sh("echo alive", time.Minute); got != "alive\n" {
		t.Errorf("after the python bombs: %q", got)
	}
}
