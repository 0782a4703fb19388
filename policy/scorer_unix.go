//go:build unix

package policy

import (
	"os/exec"
	"syscall"
)

// killGroup runs the scorer in its own process group and kills the whole
// group when its time is up, so that nothing it started outlives the decision.
func killGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
}
