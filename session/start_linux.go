package session

import (
	"bytes"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/guest"
	"github.com/dryexec/dryexec/rung/linuxns"
	"github.com/dryexec/dryexec/wire"
)

func socketPair() (*os.File, *os.File, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	// Non-blocking, so that the runtime poller owns our end and Close interrupts
	// a Read in progress.
	if err := unix.SetNonblock(fds[0], true); err != nil {
		unix.Close(fds[0])
		unix.Close(fds[1])
		return nil, nil, err
	}
	return os.NewFile(uintptr(fds[0]), "ctrl"), os.NewFile(uintptr(fds[1]), "guest-ctrl"), nil
}

func startHostGuest(exe string, ctrl *os.File) (*exec.Cmd, error) {
	if exe == "" {
		exe = guest.Executable()
	}
	cmd := &exec.Cmd{
		Path: exe, Args: []string{"dryexec", "guest", guest.RoleSession}, Env: []string{},
		ExtraFiles:  []*os.File{ctrl},
		SysProcAttr: &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL},
	}
	return cmd, cmd.Start()
}

func startNSGuest(exe string, ctrl *os.File, start *wire.SessionStart, opt Options) (*exec.Cmd, containment, error) {
	r := &linuxns.Rung{GuestExe: exe, Cgroups: opt.Cgroups}
	mounts, err := linuxns.Mounts()
	if err != nil {
		return nil, nil, err
	}
	masks, err := linuxns.ResolveMasks(opt.Masks, opt.NoDefaultMasks)
	if err != nil {
		return nil, nil, err
	}
	lim, err := r.NewLimiter("se_"+strings.TrimPrefix(dryexec.NewTrialID(), "tr_"), opt.Limits)
	if err != nil {
		return nil, nil, err
	}
	host, _ := os.Hostname()
	start.Mounts, start.Hostname, start.Masks = mounts, host, masks
	start.Rootless, start.CommandUserNS = os.Getuid() != 0, true
	start.CommandUID, start.CommandGID = os.Getuid(), os.Getgid()
	// Each exec is a fresh fork of the guest's launcher thread: once the
	// session is up, the guest's other threads leave the pids limit
	// (Limiter.ShelterSupervisor); until then, and where that cannot be
	// done, the limit keeps cgroup.ShelterHeadroom of room.
	cmd, err := r.StartGuestLimited(guest.RoleSession, []*os.File{ctrl}, lim)
	if err != nil {
		lim.Close()
		return nil, nil, err
	}
	return cmd, &nsContainment{lim: lim, masks: masks, watch: linuxns.NewMaskWatch()}, nil
}

// nsContainment is an ns session's cgroup and masks.
type nsContainment struct {
	lim   *linuxns.Limiter
	masks []string
	watch *linuxns.MaskWatch
}

func (c *nsContainment) pin(pid int) error {
	if err := c.lim.ShelterSupervisor(pid); err != nil {
		return err
	}
	return c.watch.Pin(pid, c.masks)
}

func (c *nsContainment) check() []dryexec.Violation {
	v, _ := c.lim.Violations()
	return append(v, c.watch.Check()...)
}

func (c *nsContainment) warnings() []string {
	w := c.lim.Warnings()
	if mw := c.watch.Warning(); mw != "" {
		w = append(w, mw)
	}
	return w
}

func (c *nsContainment) close() {
	c.watch.Close()
	c.lim.Close()
}

// killSession SIGKILLs every process whose session id is sid, until none is left
// (a process may fork while being killed; a few rounds catch that).
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
