package guest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path"
	"runtime"
	"slices"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/containment/seccomp"
	"github.com/dryexec/dryexec/internal/testhooks"
	"github.com/dryexec/dryexec/wire"
)

// runGVisorView is the gvisor rung's view guest (wire.VerbGVisorExec): on the
// host kernel, in a mount namespace of its own, it builds the same overlays
// and masks as an ns trial's view, beneath a scratch tmpfs, but does not
// enter them: it hands them to runsc as the container's root (with runsc's
// own overlay off, so that every write of the sandbox lands in these upper
// dirs, which the host walks), then becomes runsc. The host takes its own
// handle on the scratch tmpfs (trial.mounts' ScratchFD) before that.
func runGVisorView() int {
	conn := wire.NewConn(os.NewFile(wire.CtrlFD, "ctrl"))
	fail := func(code string, err error) int { return sendFailure(conn, code, err) }
	cfg, code, ok := greet(conn, wire.RoleGVisorView)
	if !ok {
		return code
	}
	if cfg.Rootless {
		return fail("setup", errors.New("the gvisor view does not support rootless sandboxes"))
	}
	// The network namespace is the view guest's own (the host made it):
	// lo, and with a network netsim's TUN device, which runsc's
	// --network=sandbox serves to gVisor's netstack; the device's other end
	// goes to the host, as the ns guest's does.
	if err := loopbackUp(); err != nil {
		return fail("net", err)
	}
	if _, err := sendTUN(&cfg); err != nil {
		return fail("net", err)
	}
	scratchDir, scratch, uppers, err := buildGVisorView(&cfg)
	if err != nil {
		return fail("setup", err)
	}
	if err := conn.Send(wire.KindEvent, wire.VerbTrialMounts, 0, &wire.TrialMounts{Paths: uppers, ScratchFD: scratch}); err != nil {
		return 1
	}
	f, err := conn.Read()
	if err != nil {
		return 1
	}
	var ex wire.GVisorExec
	if f.Verb != wire.VerbGVisorExec {
		return fail("protocol", fmt.Errorf("expected %s, got %q", wire.VerbGVisorExec, f.Verb))
	}
	if err := f.Decode(&ex); err != nil {
		return fail("protocol", err)
	}
	if !path.IsAbs(ex.Path) || len(ex.Argv) == 0 {
		return fail("protocol", errors.New("gvisor.exec without an absolute runsc path"))
	}
	bundle := scratchDir + "/" + wire.GVisorBundle
	if err := os.WriteFile(bundle+"/config.json", ex.Config, 0o600); err != nil {
		return fail("setup", err)
	}
	for _, fd := range ex.Keep {
		if fd <= wire.CtrlFD {
			return fail("protocol", fmt.Errorf("gvisor.exec cannot keep descriptor %d", fd))
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, 0); err != nil {
			return fail("setup", fmt.Errorf("keeping descriptor %d for runsc: %w", fd, err))
		}
	}
	// runsc is run from the scratch dir: its state (--root) and the bundle
	// are named relative to it, so the host needs not know where it is.
	if err := unix.Chdir(scratchDir); err != nil {
		return fail("setup", err)
	}
	// The stream closes at the exec (close-on-exec): the host reads that as
	// runsc having started; its errors go to the stderr the host gave us.
	err = unix.Exec(ex.Path, ex.Argv, []string{"PATH=/usr/sbin:/usr/bin:/sbin:/bin"})
	return fail("setup", fmt.Errorf("exec %s: %w", ex.Path, err))
}

// buildGVisorView mounts the scratch tmpfs, the overlays of every planned
// host mount (or, on an image, the one overlay of its layers) beneath scratch/root and the masks over them (as buildView, but
// without /proc, /dev and /sys, which gVisor provides, and without entering
// the view), with netsim's resolv.conf and trust bundle bound in when the
// sandbox has a network. It returns the scratch dir, a descriptor of it and the host
// path each upper dir stands for.
func buildGVisorView(cfg *wire.TrialStart) (string, int, []string, error) {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return "", -1, nil, fmt.Errorf("making mounts private: %w", err)
	}
	scratchDir := ""
	for _, c := range scratchCandidates {
		if st, err := os.Lstat(c); err == nil && st.IsDir() {
			scratchDir = c
			break
		}
	}
	if scratchDir == "" {
		return "", -1, nil, errors.New("no directory to mount the scratch tmpfs on")
	}
	opts := "mode=0700"
	if cfg.UpperSize > 0 {
		opts += ",size=" + strconv.FormatInt(cfg.UpperSize, 10)
	}
	if err := unix.Mount("dryexec", scratchDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return "", -1, nil, fmt.Errorf("mounting scratch tmpfs: %w", err)
	}
	scratch, err := unix.Open(scratchDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", -1, nil, fmt.Errorf("opening scratch: %w", err)
	}
	for _, d := range []string{"root", "u", "w", "s", wire.GVisorRun} {
		if err := os.Mkdir(scratchDir+"/"+d, 0o700); err != nil {
			return "", -1, nil, err
		}
	}
	// runsc's state and the bundle get a tmpfs of their own: the scratch
	// tmpfs holds only what the sandbox wrote, so that it being full (the
	// trial's write budget) is still seen after runsc removed its state.
	if err := unix.Mount("dryexec-runsc", scratchDir+"/"+wire.GVisorRun, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0700,size=16m"); err != nil {
		return "", -1, nil, fmt.Errorf("mounting runsc's tmpfs: %w", err)
	}
	for _, d := range []string{wire.GVisorBundle, wire.GVisorState} {
		if err := os.Mkdir(scratchDir+"/"+d, 0o700); err != nil {
			return "", -1, nil, err
		}
	}
	root := scratchDir + "/root"
	b := &overlayBuilder{scratch: scratchDir, root: root, seed: cfg.SeedUppers}
	if len(cfg.Image) > 0 {
		// A sandbox on an image: its layers are the one lower of "/", as
		// in the ns guest's view (nothing of the host's filesystem).
		// And /tmp beneath the image, for an image without one: the
		// mount point of the read-only /tmp the host's spec then binds
		// there (runsc would otherwise make one in the view's upper).
		if err := b.image(cfg.Image, wire.GVisorImageGuest, "/tmp/"); err != nil {
			return "", -1, nil, err
		}
		if err := bindSelf(root + wire.GVisorImageGuest); err != nil {
			return "", -1, nil, err
		}
	}
	for _, m := range cfg.Mounts {
		if len(cfg.Image) > 0 {
			break
		}
		if err := b.dir(m.Path); err != nil && !(errors.Is(err, errVanished) && m.Path != "/") {
			return "", -1, nil, err
		}
	}
	if err := mountMasks(scratchDir, root, cfg.Masks, cfg.Hidden, false); err != nil {
		return "", -1, nil, err
	}
	if err := bindNetFiles(cfg, scratchDir, root); err != nil {
		return "", -1, nil, err
	}
	return scratchDir, scratch, b.uppers, nil
}

// bindSelf binds this binary, read-only, at target: the gvisor view of an
// image, which runsc must find the guest in (wire.GVisorImageGuest). By its
// path, not through /proc/self/exe: the host may have started this process
// from its own /proc/self/exe, a file on a mount of the host's namespace,
// which mount(2) refuses to bind into this one (EINVAL); the path names the
// same file on this namespace's copy of that mount.
func bindSelf(target string) error {
	self, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return fmt.Errorf("placing the guest in the image's view: %w", err)
	}
	if err := unix.Mount(self, target, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("placing the guest (%s) in the image's view: %w", self, err)
	}
	if err := unix.Mount("", target, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		return fmt.Errorf("placing the guest in the image's view: read-only: %w", err)
	}
	return nil
}

// runGVisorTrial is the gvisor rung's trial guest, the container's first
// process inside gVisor. It runs the command as the ns guest does (the
// command stub, in a session and user namespace of its own, the host
// writing the command to the stub's pipe), kills whatever the command left
// once it has ended, and reports how it ended. What gVisor provides itself
// it does not do: no view (the container's root is the view guest's), no
// seccomp or Landlock (the sandbox's system calls go to gVisor's kernel),
// no memory tracer, no walk (the host walks the upper dirs, which are on
// its side, once the sandbox is gone).
func runGVisorTrial() int {
	conn := wire.NewConn(os.NewFile(wire.CtrlFD, "ctrl"))
	cfg, code, ok := greet(conn, wire.RoleGVisorTrial)
	if !ok {
		return code
	}
	return runInnerTrial(conn, &cfg, gvisorProfile(), func() ([]wire.SandboxNode, []string) {
		return sandboxFIFOs(wire.GVisorLogFD)
	}, nil, nil, nil)
}

// runInnerTrial is the part of the trial guest shared by the gvisor-trial
// and vm-init roles, after the greeting: inside a kernel of the sandbox's
// own, it starts the command, waits for it, kills what it left, syncs (the
// host walks the upper dirs on its side) and reports. nodes, when not nil,
// finds what the sandbox's kernel keeps in its own memory for the host to
// make in the upper dirs (gvisor: FIFOs). fifos, when not nil, serves the
// calls prof hands to the supervisor (vm: mknod); oom, when not nil, counts
// the sandbox kernel's OOM kills into trial.exit (vm); full, when not nil,
// says there whether the upper dir's budget was used up (vm on an image:
// the host's scratch does not hold the VM's upper dir). It returns the
// process's exit status.
func runInnerTrial(conn *wire.Conn, cfgp *wire.TrialStart, prof *seccomp.Profile, nodes func() ([]wire.SandboxNode, []string), fifos *vmFIFOs, oom *vmOOM, full func() bool) int {
	cfg := *cfgp
	fail := func(code string, err error) int { return sendFailure(conn, code, err) }
	if cfg.Hostname != "" {
		unix.Sethostname([]byte(cfg.Hostname))
	}
	var srv *seccomp.Server
	var answers func(*wire.Frame)
	if fifos != nil {
		srv = &seccomp.Server{Profile: prof, Handle: fifos.handle}
		answers = fifos.answer
	}
	// gVisor delivers SIGKILL and SIGSTOP to this guest from inside:
	// there the command gets a pid namespace of its own (commandPIDNS).
	// The VM's kernel is Linux, which drops them.
	stub, pidns, err := startGVisorStub(&cfg, prof, srv, fifos == nil && oom == nil)
	if err != nil {
		return fail("setup", err)
	}
	defer pidns.close()
	if oom != nil {
		// After the stub's fork: the command keeps the score it had.
		oom.protect()
	}
	// The command may signal this process: it is uid 0 as the guest is,
	// and gVisor has no Landlock to scope its signals as the ns guest does.
	// PID 1 of a pid namespace gets from inside it only the signals it
	// handles, and the Go runtime handles them all (SIGTERM would end the
	// guest): ignored, none reaches it. Only now, after the stub's fork, so
	// that the command does not inherit the ignored dispositions.
	signal.Ignore(guestIgnored...)
	ran := make(chan runStarted, 1)
	timedOut := make(chan struct{})
	toRun := ran
	if oom != nil && testhooks.Enabled {
		// In the VM, the tests' kernel panic as the command starts
		// (testhooks.VMPanicEnv): trial.run is in cfg once readRun hands
		// it over.
		in := make(chan runStarted, 1)
		toRun = in
		go func() {
			st := <-in
			vmRootHook(&cfg)
			ran <- st
			vmPanicHook(cfg.Argv)
		}()
	}
	go readRun(conn, &cfg, toRun, timedOut, answers)
	settled := func(exit *wire.TrialExit) error {
		if srv != nil {
			// A node the host is making for a call under way is in
			// the view before the command's end is.
			srv.Quiesce()
		}
		// gVisor (or the VM's kernel) may hold written pages in its own
		// cache (a file's shared mapping): sync puts them in the upper
		// dirs before the host walks.
		unix.Sync()
		if oom != nil {
			exit.OOMKills = oom.kills()
		}
		if full != nil {
			exit.UpperFull = full()
		}
		return conn.Send(wire.KindEvent, wire.VerbTrialExit, 0, exit)
	}
	done, err := runCommand(&cfg, stub, nil, ran, timedOut, settled, false)
	if err != nil {
		return 1
	}
	if nodes != nil {
		// Every process of the command is gone: what is left is final.
		done.Nodes, done.NodesLost = nodes()
	}
	if err := conn.Send(wire.KindEvent, wire.VerbTrialDone, 0, done); err != nil {
		return 1
	}
	return 0
}

// guestIgnored are the signals whose default action ends a process and
// which may be caught: the trial guest inside gVisor ignores them all.
var guestIgnored = []os.Signal{unix.SIGHUP, unix.SIGINT, unix.SIGQUIT, unix.SIGILL, unix.SIGTRAP, unix.SIGABRT,
	unix.SIGBUS, unix.SIGFPE, unix.SIGUSR1, unix.SIGSEGV, unix.SIGUSR2, unix.SIGPIPE, unix.SIGALRM, unix.SIGTERM,
	unix.SIGSTKFLT, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU, unix.SIGXCPU, unix.SIGXFSZ, unix.SIGVTALRM,
	unix.SIGPROF, unix.SIGIO, unix.SIGPWR, unix.SIGSYS}

// startGVisorStub starts the command's stub (the native one, as on ns; no
// Landlock ruleset, which gVisor does not have, and no memory tracer) from a
// thread of its own under no_new_privs and prof's seccomp filter,
// which the stub and so the command inherit. The thread is never given back
// to the runtime: it ends with its goroutine. With srv, the filter has a
// listener that srv serves (its refusals are then answered by srv, with the
// same errnos, unreported).
//
// With ownPIDNS, the thread first makes a pid namespace for the stub
// (commandPIDNS), before the filter, which refuses that.
func startGVisorStub(cfg *wire.TrialStart, prof *seccomp.Profile, srv *seccomp.Server, ownPIDNS bool) (*cmdStub, *commandPIDNS, error) {
	type started struct {
		stub  *cmdStub
		pidns *commandPIDNS
		err   error
	}
	ch := make(chan started, 1)
	go func() {
		runtime.LockOSThread()
		var pidns *commandPIDNS
		if ownPIDNS {
			var err error
			if pidns, err = newCommandPIDNS(false); err != nil {
				ch <- started{err: err}
				return
			}
		}
		prog, err := prof.Program(srv != nil)
		listener := -1
		if err == nil {
			listener, err = seccomp.Install(prog, srv != nil)
		}
		if err == nil && listener >= 0 {
			go srv.Serve(context.Background(), listener)
		}
		if err != nil {
			pidns.close()
			ch <- started{err: fmt.Errorf("confining the command: %w", err)}
			return
		}
		root := ""
		if pidns != nil {
			root = pidns.chroot()
		}
		s, err := startTrialStub(cfg, nil, -1, root)
		if err != nil {
			pidns.close()
		}
		ch <- started{s, pidns, err}
	}()
	s := <-ch
	return s.stub, s.pidns, s.err
}

// innerProfile is the seccomp profile of a command inside a kernel of the
// sandbox's own (gVisor's, the VM's): the ns rung's (that kernel implements
// what it refuses, but for the sandbox alone: refusing it keeps the rungs'
// commands alike), and, in place of
// the Landlock signal scope that keeps an ns command's signals from its
// guest, no signal to PID 1 (this guest) by any call. The refusals are
// answered in the filter (no user notification in gVisor), so they are not
// reported as violations.
func innerProfile() *seccomp.Profile {
	p := seccomp.Default()
	pid1 := []seccomp.Cond{{Arg: 0, Op: seccomp.OpEq, Value: 1}}
	const why = "the guest supervisor (pid 1)"
	for _, name := range []string{"kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo", "pidfd_open"} {
		p.Rules = append(p.Rules, seccomp.Rule{Name: name, Errno: unix.EPERM, Conds: pid1, Why: why})
	}
	// tkill names a thread only, and the guest's threads are the
	// sandbox's first tids: refused whole (libc signals threads with tgkill).
	p.Rules = append(p.Rules, seccomp.Rule{Name: "tkill", Errno: unix.EPERM, Why: why})
	// SIGIO aimed at the guest (F_SETOWN, F_SETOWN_EX at any of its
	// threads) carries the signal F_SETSIG names: the guest handles every
	// signal but the two it cannot, which gVisor (unlike Linux) delivers
	// to its init from inside. The guest's other thread ids are out of the
	// command's reach on gvisor by its own pid namespace (commandPIDNS),
	// and /proc's directories by gvisorProfile.
	for _, sig := range []unix.Signal{unix.SIGKILL, unix.SIGSTOP} {
		p.Rules = append(p.Rules, seccomp.Rule{Name: "fcntl", Errno: unix.EINVAL, Why: "an I/O signal that cannot be handled (" + why + " could be its owner)",
			Conds: []seccomp.Cond{{Arg: 1, Op: seccomp.OpEq, Value: unix.F_SETSIG}, {Arg: 2, Op: seccomp.OpEq, Value: uint32(sig)}}})
	}
	return p
}

// gvisorProfile is the seccomp profile of a command inside gVisor:
// innerProfile's, and no socket node (below). A FIFO is allowed: gVisor
// keeps it in its own memory, and the trial guest reports it for the host
// to make in the upper dirs (sandboxFIFOs).
func gvisorProfile() *seccomp.Profile {
	p := innerProfile()
	// A socket node made by mknod would live in gVisor's memory alone, as
	// a FIFO does, and commit makes none anyway (only bind(2) makes a
	// usable one): EPERM, what Linux answers for a filesystem that does
	// not support the node type, rather than a node the delta lacks.
	// A pidfd made from a /proc directory names a process the command's
	// pid namespace (commandPIDNS) hides: /proc is the sandbox's, and
	// /proc/1 is this guest, whose SIGKILL gVisor delivers. ENOSYS, as a
	// kernel without pidfds answers: Go, systemd and the like fall back to
	// kill(2) then.
	// chroot is let through: a command's process chroots to its pid
	// namespace's root before its exec (commandPIDNS), under this filter.
	// A breakout from that root (chroot to a subdir, ".." upwards) ends in
	// gVisor's empty, read-only root beneath the container's, with no
	// /proc at all (test/escape's chroot attempts), and no_new_privs keeps
	// a set-user-ID program in a root of the command's own making from
	// gaining anything. The price: gVisor (as Linux) refuses a user
	// namespace to a chrooted process, which the command now is.
	p.Rules = slices.DeleteFunc(p.Rules, func(r seccomp.Rule) bool { return r.Name == "chroot" })
	p.Rules = append(p.Rules, seccomp.Rule{Name: "pidfd_send_signal", Errno: unix.ENOSYS,
		Why: "a pidfd of a /proc directory reaches past the command's pid namespace (the guest supervisor at /proc/1)"})
	const noNode = "a socket node inside gVisor exists in its memory only, where the delta cannot see it"
	for _, c := range []struct {
		name string
		arg  int
	}{{"mknod", 1}, {"mknodat", 2}} {
		p.Rules = append(p.Rules, seccomp.Rule{Name: c.name, Errno: unix.EPERM, Why: noNode,
			Conds: []seccomp.Cond{{Arg: c.arg, Op: seccomp.OpMaskedEq, Mask: unix.S_IFMT, Value: unix.S_IFSOCK}}})
	}
	return p
}
