package cli

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/dryexec/dryexec/cgroup"
	"github.com/dryexec/dryexec/internal/guestexe"
)

// TestLocalRunsLeaveNothing: `dryexec run --via local` as a process of its
// own, N times (and once failing beside its sandbox's start), each trial leaving a process behind in the sandbox and
// netsim's role started beside its guest; run by the engine and by the
// local engine (cmd/dryexec-local, its guest beside it). Once each dryexec
// has exited (the marker: its exit status), nothing of its trial is left
// on the host: no cgroup named after it, no process of its binaries
// (guest, netsim role) but this test, no process the command started, and
// the host's mounts as they were.
func TestLocalRunsLeaveNothing(t *testing.T) {
	requireNS(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	self, _ = filepath.EvalSymlinks(self)
	local := buildLocal(t)
	const marker = "987.125" // the background sleep's argument: what to look for
	mountsBefore := mountLines(t)
	home, dir := t.TempDir(), t.TempDir()
	for _, b := range []struct {
		name string
		bin  string
		vars []string
		exes []string // the binaries its trials run
	}{
		{"engine", os.Args[0], []string{"DRYEXEC_TEST_AS_CLI=1"}, []string{self}},
		{"local", local, nil, []string{local, filepath.Join(filepath.Dir(local), guestexe.Name)}},
	} {
		// Run 4 fails in the store's start-up (a bad setting), which
		// runs beside its sandbox's start: whatever of that sandbox was
		// made must go too. (localrun's TestPrestartGoesOnFailure fails
		// there only once the sandbox is ready, for certain.) Run 5's
		// summary cannot be written (its stdout a pipe nobody reads, as
		// `| head` leaves it): the write's SIGPIPE ends it right after the
		// trial, and the trial's sandbox must be gone by then.
		for i := range 6 {
			failing, unread := i == 4, i == 5
			cmd := exec.Command(b.bin, "run", "--via", "local", "-q", "-C", dir, "--", "sh", "-c", "sleep "+marker+" & echo x > f")
			cmd.Env = append([]string{"DRYEXEC_HOME=" + home, "PATH=/usr/bin:/bin"}, b.vars...)
			if failing {
				cmd.Env = append(cmd.Env, "DRYEXEC_TRIAL_TTL=soon")
			}
			var unreadW *os.File
			if unread {
				r, w, err := os.Pipe()
				if err != nil {
					t.Fatal(err)
				}
				r.Close()
				cmd.Stdout, unreadW = w, w
			}
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			err := cmd.Run()
			if unreadW != nil {
				unreadW.Close()
			}
			var ee *exec.ExitError
			switch {
			case unread && (!errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGPIPE):
				t.Fatalf("%s, run with its stdout unread: %v, want killed by SIGPIPE\n%s", b.name, err, stderr.String())
			case unread:
			case failing && (!errors.As(err, &ee) || ee.ExitCode() != ExitUsage || !strings.Contains(stderr.String(), "DRYEXEC_TRIAL_TTL")):
				t.Fatalf("%s, run with a bad DRYEXEC_TRIAL_TTL: %v, want exit %d naming it\n%s", b.name, err, ExitUsage, stderr.String())
			case !failing && err != nil && !(errors.As(err, &ee) && (ee.ExitCode() == ExitReview || ee.ExitCode() == ExitCommandFailed)):
				t.Fatalf("%s, run %d: %v\n%s", b.name, i, err, stderr.String())
			}
			checkNothingLeft(t, fmt.Sprintf("%s, run %d", b.name, i), cmd.Process.Pid, b.exes, marker)
		}
	}
	if after := mountLines(t); after != mountsBefore {
		t.Errorf("the host's mounts changed:\nbefore %s\nafter  %s", mountsBefore, after)
	}
	if _, err := os.Stat(filepath.Join(dir, "f")); err == nil {
		t.Error("a trial wrote to the host")
	}
}

// checkNothingLeft fails t (saying what) if a cgroup named after the dryexec
// process pid, or a process of exes or with marker in its command line, is
// left on the host.
func checkNothingLeft(t *testing.T, what string, pid int, exes []string, marker string) {
	t.Helper()
	tag := "." + strconv.Itoa(pid) + "-"
	for _, g := range cgroup.Leftovers() {
		if strings.Contains(filepath.Base(g), tag) {
			t.Errorf("%s: its sandbox's cgroup is left: %s", what, g)
		}
	}
	for _, exe := range exes {
		for p, cmdline := range liveProcs(t, exe, marker) {
			t.Errorf("%s: a process is left: %d %s", what, p, cmdline)
		}
	}
}

// liveProcs lists the processes, other than this one, that run exe (this
// test binary: a guest or a netsim role) or whose command line holds marker.
func liveProcs(t *testing.T, exe, marker string) map[int]string {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || len(b) == 0 {
			continue // gone, or a zombie already reaped by its parent
		}
		line := strings.ReplaceAll(string(bytes.TrimRight(b, "\x00")), "\x00", " ")
		if x, _ := os.Readlink("/proc/" + e.Name() + "/exe"); x == exe || strings.Contains(line, marker) {
			out[pid] = line
		}
	}
	return out
}

// mountLines is the host's mount table as this process sees it.
func mountLines(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
