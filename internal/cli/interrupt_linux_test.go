package cli

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dryexec/dryexec/internal/guestexe"
)

// TestInterrupt: Ctrl-C (SIGINT) or SIGTERM during a trial stops it, says
// what became of it (not kept, host unchanged) and exits 130 or 143, as a
// shell reports a command killed by that signal; in the engine and in the
// local engine (cmd/dryexec-local). The signal is sent once the command's
// own output ("ready", shown live) says it is running.
func TestInterrupt(t *testing.T) {
	requireNS(t)
	local := buildLocal(t)
	for _, tt := range []struct {
		sig  syscall.Signal
		name string
		code int
		bin  string
		vars []string
	}{
		{syscall.SIGINT, "SIGINT", ExitInterrupted, os.Args[0], []string{"DRYEXEC_TEST_AS_CLI=1"}},
		{syscall.SIGTERM, "SIGTERM", ExitTerminated, os.Args[0], []string{"DRYEXEC_TEST_AS_CLI=1"}},
		{syscall.SIGINT, "SIGINT", ExitInterrupted, local, []string{"DRYEXEC_ENGINE=/nonexistent"}},
		{syscall.SIGTERM, "SIGTERM", ExitTerminated, local, []string{"DRYEXEC_ENGINE=/nonexistent"}},
	} {
		t.Run(tt.name+"/"+filepath.Base(tt.bin), func(t *testing.T) {
			home, dir := t.TempDir(), t.TempDir()
			cmd := exec.Command(tt.bin, "run", "-C", dir, "--", "sh", "-c", "echo ready; echo x > x; sleep 60")
			cmd.Env = append(append(os.Environ(), "DRYEXEC_HOME="+home), tt.vars...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			line, err := bufio.NewReader(out).ReadString('\n')
			if err != nil || line != "ready\n" {
				cmd.Process.Kill()
				t.Fatalf("first line %q, %v", line, err)
			}
			start := time.Now()
			cmd.Process.Signal(tt.sig)
			err = cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != tt.code {
				t.Fatalf("exit %v, want %d\n%s", err, tt.code, stderr.String())
			}
			if took := time.Since(start); took > 30*time.Second {
				t.Errorf("took %v to stop", took)
			}
			want := "dryexec: interrupted (" + tt.name + "): trial tr_"
			if !strings.Contains(stderr.String(), want) || !strings.Contains(stderr.String(), "was stopped before it finished; nothing of it was kept") {
				t.Errorf("stderr does not say what became of the trial:\n%s", stderr.String())
			}
			if _, err := os.Stat(dir + "/x"); err == nil {
				t.Error("the interrupted trial reached the host")
			}
			if _, out, _ := cli(t, home, "ls"); !strings.Contains(out, "store: 0 trials") {
				t.Errorf("ls after the interrupt:\n%s", out)
			}
		})
	}
}

// TestBrokenPipe: a run whose live output's reader goes away mid-trial
// (`dryexec run -- cmd | head`) ends as a command killed by SIGPIPE does
// (exit 141), but only after stopping its trial and tearing its sandbox
// down, and says so: nothing is kept, no cgroup or process of it is left.
// (The Go runtime's default, death at the write, left the sandbox's
// cgroups for the next command to sweep.) The reader goes once the
// command's first line says it is running; the command then writes on.
func TestBrokenPipe(t *testing.T) {
	requireNS(t)
	local := buildLocal(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	self, _ = filepath.EvalSymlinks(self)
	const marker = "987.141" // the background sleep's argument: what to look for
	for _, tt := range []struct {
		name string
		bin  string
		vars []string
		exes []string // the binaries its trials run
	}{
		{"engine", os.Args[0], []string{"DRYEXEC_TEST_AS_CLI=1"}, []string{self}},
		{"local", local, []string{"DRYEXEC_ENGINE=/nonexistent"}, []string{local, filepath.Join(filepath.Dir(local), guestexe.Name)}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			home, dir := t.TempDir(), t.TempDir()
			cmd := exec.Command(tt.bin, "run", "--via", "local", "--timeout", "60s", "-C", dir, "--",
				"sh", "-c", "sleep "+marker+" & echo ready; echo x > x; while :; do echo y; done")
			cmd.Env = append(append(os.Environ(), "DRYEXEC_HOME="+home), tt.vars...)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			r, w, err := os.Pipe()
			if err != nil {
				t.Fatal(err)
			}
			cmd.Stdout = w
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			w.Close()
			line, err := bufio.NewReader(r).ReadString('\n')
			r.Close() // the reader goes: the next live write finds no one
			if err != nil || line != "ready\n" {
				cmd.Process.Kill()
				t.Fatalf("first line %q, %v", line, err)
			}
			err = cmd.Wait()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != ExitBrokenPipe {
				t.Fatalf("exit %v, want %d\n%s", err, ExitBrokenPipe, stderr.String())
			}
			if s := stderr.String(); !strings.Contains(s, "dryexec: interrupted (SIGPIPE") || !strings.Contains(s, "was stopped before it finished; nothing of it was kept") {
				t.Errorf("stderr does not say what became of the trial:\n%s", s)
			}
			checkNothingLeft(t, tt.name, cmd.Process.Pid, tt.exes, marker)
			if _, err := os.Stat(dir + "/x"); err == nil {
				t.Error("the stopped trial reached the host")
			}
			if _, out, _ := cli(t, home, "ls"); !strings.Contains(out, "store: 0 trials") {
				t.Errorf("ls after the broken pipe:\n%s", out)
			}
		})
	}
}
