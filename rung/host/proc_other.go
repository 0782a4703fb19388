//go:build !linux

package host

import "syscall"

func guestAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setpgid: true} }

// guestEnded: how a guest ended is not looked at here.
func guestEnded(int) (string, bool) { return "", false }

// killSession kills the exec's process group (its session leader's group).
func killSession(sid int) { syscall.Kill(-sid, syscall.SIGKILL) }
