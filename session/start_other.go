//go:build !linux

package session

import (
	"context"
	"os"
	"os/exec"
	"syscall"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/guest"
	"github.com/dryexec/dryexec/wire"
)

func socketPair() (*os.File, *os.File, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
	if err != nil {
		return nil, nil, err
	}
	syscall.CloseOnExec(fds[0])
	syscall.CloseOnExec(fds[1])
	syscall.SetNonblock(fds[0], true)
	return os.NewFile(uintptr(fds[0]), "ctrl"), os.NewFile(uintptr(fds[1]), "guest-ctrl"), nil
}

func startHostGuest(exe string, ctrl *os.File) (*exec.Cmd, error) {
	if exe == "" {
		exe = guest.Executable()
	}
	cmd := &exec.Cmd{
		Path: exe, Args: []string{"dryexec", "guest", guest.RoleSession}, Env: []string{},
		ExtraFiles:  []*os.File{ctrl},
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true},
	}
	return cmd, cmd.Start()
}

func startNSGuest(ctx context.Context, exe string, ctrl *os.File, start *wire.SessionStart, opt Options) (*exec.Cmd, containment, error) {
	return nil, nil, &dryexec.IsolationUnavailableError{Rung: "ns", Missing: "Linux namespaces (this is not Linux)"}
}

// killSession kills the exec's process group (its session leader's group).
func killSession(sid int) { syscall.Kill(-sid, syscall.SIGKILL) }

// sandboxKey: no ns sessions here, so nothing of the host they depend on.
func sandboxKey(opt Options) (string, error) { return "", nil }

// guestState: how a guest ended is not looked at here.
func guestState(int) (string, bool) { return "", false }
