package session

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"slices"
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

func startNSGuest(ctx context.Context, exe string, ctrl *os.File, start *wire.SessionStart, opt Options) (*exec.Cmd, containment, error) {
	r := &linuxns.Rung{GuestExe: exe, Cgroups: opt.Cgroups}
	mounts, err := linuxns.Mounts()
	if err != nil {
		return nil, nil, err
	}
	id := "se_" + strings.TrimPrefix(dryexec.NewTrialID(), "tr_")
	caDir, err := linuxns.EnsureCA(opt.NetCADir)
	if err != nil {
		return nil, nil, err
	}
	// The network first: a bad spec is the caller's error before anything
	// else is made, and mocks without a TUN device refuse here.
	nw, err := linuxns.NewNet(ctx, opt.Net, caDir, id)
	if err != nil {
		return nil, nil, err
	}
	// netsim's CA key signs what the sandbox trusts: it stays masked whoever
	// opened the session (the daemon masks it too; a Go caller may not).
	extra := append(slices.Clone(opt.Masks), caDir)
	// dryexec's own state is hidden whatever the options say.
	cover, err := linuxns.ResolveCover(extra, opt.NoDefaultMasks, opt.OwnPaths)
	if err != nil {
		nw.Close()
		return nil, nil, err
	}
	masks := cover.Masks
	lim, err := r.NewLimiter(id, opt.Limits)
	if err != nil {
		nw.Close()
		return nil, nil, err
	}
	host, _ := os.Hostname()
	start.Mounts, start.Hostname, start.Masks, start.Hidden = mounts, host, masks, cover.Hidden
	start.Rootless, start.CommandUserNS = os.Getuid() != 0, true
	start.CommandUID, start.CommandGID = os.Getuid(), os.Getgid()
	// Under the rlimit fallback each exec gets the pids limit; the guest
	// keeps more for its own threads (a bomb must not take them).
	start.CommandNPROC = lim.CommandNPROC()
	files := []*os.File{ctrl}
	netFD := 0
	if f := nw.GuestFile(); f != nil {
		netFD = wire.CtrlFD + len(files)
		files = append(files, f)
	}
	// Each exec is a fresh fork of the guest's launcher thread: once the
	// session is up, the guest's other threads leave the pids limit
	// (Limiter.ShelterSupervisor); until then, and where that cannot be
	// done, the limit keeps cgroup.ShelterHeadroom of room.
	cmd, err := r.StartGuestLimited(guest.RoleSession, files, lim)
	if err != nil {
		lim.Close()
		nw.Close()
		return nil, nil, err
	}
	// The guest has its end of the hand-over socket: netsim waits for the
	// device, and ends when Close stops it (or the guest dies first).
	nw.Serve(ctx)
	return cmd, &nsContainment{lim: lim, masks: masks, watch: linuxns.NewMaskWatch(), net: nw, netFD: netFD}, nil
}

// nsContainment is an ns session's cgroup, masks and network.
type nsContainment struct {
	lim   *linuxns.Limiter
	masks []string
	watch *linuxns.MaskWatch
	net   *linuxns.Net // alive until close
	netFD int          // the guest's end of the TUN hand-over socket (0: none)
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
	if nw := c.net.Warning(); nw != "" {
		w = append(w, nw)
	}
	return w
}

func (c *nsContainment) prepare(start *wire.SessionStart) { c.net.SetupSession(start, c.netFD) }

func (c *nsContainment) network() []dryexec.NetworkEvent { return c.net.Log() }

func (c *nsContainment) close() {
	c.net.Close()
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

// sandboxKey says what of the host an ns session opened with opt now would
// be built from (the host mount plan, the resolved masks): a pooled session
// made from another is stale.
func sandboxKey(opt Options) (string, error) {
	if opt.Rung != "ns" {
		return "", nil
	}
	mounts, err := linuxns.Mounts()
	if err != nil {
		return "", err
	}
	cover, err := linuxns.ResolveCover(opt.Masks, opt.NoDefaultMasks, opt.OwnPaths)
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(struct {
		M []wire.MountSpec
		K linuxns.Cover
	}{mounts, cover})
	return string(b), err
}

// guestState says how guest process pid ended (linuxns.GuestState), waiting
// a moment for a guest whose stream just ended.
func guestState(pid int) (string, bool) { return linuxns.GuestState(pid, linuxns.GuestExitWait) }
