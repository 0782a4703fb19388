package host

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/rung/linuxns"
)

func guestAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// guestEnded says how guest process pid ended, as the ns rung's guests are
// told (linuxns.GuestState), waiting a moment for one whose stream just
// ended.
func guestEnded(pid int) (string, bool) { return linuxns.GuestState(pid, linuxns.GuestExitWait) }

// killSession SIGKILLs every process whose session id is sid, until none is
// left (a process may fork while being killed; a few rounds catch that).
func killSession(sid int) {
	for round := 0; round < 5; round++ {
		found := false
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			pid, err := strconv.Atoi(e.Name())
			if err != nil {
				continue
			}
			b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
			if err != nil {
				continue
			}
			// Fields after the command name in parentheses: state ppid pgrp session …
			i := bytes.LastIndexByte(b, ')')
			if i < 0 {
				continue
			}
			f := strings.Fields(string(b[i+1:]))
			if len(f) > 3 && f[3] == strconv.Itoa(sid) {
				unix.Kill(pid, unix.SIGKILL)
				found = true
			}
		}
		if !found {
			return
		}
	}
}
