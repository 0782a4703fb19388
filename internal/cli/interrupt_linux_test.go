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
