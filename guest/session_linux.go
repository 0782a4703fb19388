package guest

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/fswalk"
	"github.com/dryexec/dryexec/internal/testhooks"
	"github.com/dryexec/dryexec/wire"
)

// sessionPlatform is the ns rung's part of a session: the scratch tmpfs that
// holds the workspace's layers.
type sessionPlatform struct {
	scratch int // fd of the scratch tmpfs (reachable only through it after pivot_root)
	// launcher starts every exec, confined; it lives as long as the session,
	// so that all execs share one Landlock domain (a later exec may signal a
	// daemon an earlier one started) and Pdeathsig, which follows the parent
	// thread, fires only when the guest goes.
	launcher *launcher
	// trampoline is what every exec's process starts as (execTrampoline).
	trampoline *stubExe
	// pidns is the pid namespace of the session's execs (commandPIDNS),
	// joined by the launcher thread.
	pidns *commandPIDNS
	// caps lists this kernel's capabilities, read once (mapLater).
	caps []uintptr
}

// start prepares the sandbox and the workspace.
func (s *session) start() error {
	s.shell.env = s.cfg.Env
	switch s.cfg.Rung {
	case "ns":
		tc := &wire.TrialStart{Mounts: s.cfg.Mounts, Image: s.cfg.Image, UpperSize: s.cfg.UpperSize, Hostname: s.cfg.Hostname, Rootless: s.cfg.Rootless}
		tc.Masks, tc.Hidden = s.cfg.Masks, s.cfg.Hidden
		tc.Net, tc.NetFD, tc.TrustBundle, tc.TrustPath = s.cfg.Net, s.cfg.NetFD, s.cfg.TrustBundle, s.cfg.TrustPath
		// The TUN device is made while /dev/net/tun is still the host's
		// (before the view); buildView then binds netsim's resolv.conf and
		// trust bundle outside the workspace, so neither is a change a diff
		// could report.
		if _, err := sendTUN(tc); err != nil {
			return fmt.Errorf("creating the sandbox's network: %w", err)
		}
		scratch, _, err := buildView(tc, true)
		if err != nil {
			return err
		}
		s.platform = &sessionPlatform{scratch: scratch}
		s.ws = s.cfg.Workspace
		if s.ws == "" {
			s.ws = "/workspace"
		}
		layers := "/proc/self/fd/" + strconv.Itoa(scratch) + "/ws"
		st := &overlayStaging{ws: s.ws, base: layers + "/base", upper: layers + "/upper", work: layers + "/work", userXattr: s.cfg.Rootless,
			forkLayers: forkLayers{dir: layers, baseN: 1, sock: s.cfg.ForkFD}}
		if s.cfg.ForkFD > 0 {
			// The guest's alone: no exec inherits it.
			unix.CloseOnExec(s.cfg.ForkFD)
		}
		for _, d := range []string{layers, st.base, st.upper, st.work} {
			if err := os.Mkdir(d, 0o755); err != nil {
				return err
			}
		}
		if err := os.MkdirAll(s.ws, 0o755); err != nil {
			return fmt.Errorf("creating the workspace mount point: %w", err)
		}
		// The execs' mount namespace (commandPIDNS) follows what the
		// guest mounts here: a shared mount, which the init's copy of the
		// mounts receives as a slave.
		if err := unix.Mount(s.ws, s.ws, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("binding the workspace mount point: %w", err)
		}
		if err := unix.Mount("", s.ws, "", unix.MS_SHARED, ""); err != nil {
			return fmt.Errorf("sharing the workspace mount point: %w", err)
		}
		if err := s.nsLauncher(); err != nil {
			return err
		}
		s.platform.trampoline = newStubExe()
		if err := st.mount(); err != nil {
			return err
		}
		s.st = st
	case "gvisor":
		if err := s.startGVisor(); err != nil {
			return err
		}
	case "vm":
		if err := s.startVM(); err != nil {
			return err
		}
	case "host":
		if s.cfg.Workspace == "" || s.cfg.Baseline == "" {
			return fmt.Errorf("the host rung needs a workspace and a baseline directory")
		}
		s.ws = s.cfg.Workspace
		st, err := newScanStaging(s.cfg.Workspace, s.cfg.Baseline)
		if err != nil {
			return err
		}
		s.st = st
	default:
		return fmt.Errorf("unknown rung %q", s.cfg.Rung)
	}
	s.shell.cwd = s.ws
	return nil
}

// nsLauncher starts the launcher every exec of an ns session starts from:
// a thread under the sandbox's seccomp filter and Landlock domain, every
// signal blocked (startLauncher). Before it confines itself it starts the
// pid namespace every exec runs in (commandPIDNS): the execs share the
// launcher's domain, a later exec may signal a daemon an earlier one left,
// and so may signal the launcher thread too; kill of its thread id would be
// a signal to the whole guest (TestSignalsToGuestSession). In the
// namespace no exec can name any thread of the guest.
func (s *session) nsLauncher() error {
	conf, err := newConfinement(s.cfg.Rootless)
	if err != nil {
		return fmt.Errorf("confining the sandbox: %w", err)
	}
	var pidns *commandPIDNS
	conf.prepare = func() error {
		// Into the session's cgroups first (a guest born beside them):
		// the pid namespace's init is forked from here.
		if len(s.cfg.LauncherCgroups) > 0 {
			if err := enterCgroups(s.cfg.LauncherCgroups); err != nil {
				return err
			}
		}
		var err error
		pidns, err = newCommandPIDNS(true)
		return err
	}
	conf.mntNS = func() string { return pidns.mntNS }
	l, err := startLauncher(conf)
	conf.close()
	if err != nil {
		pidns.close()
		return fmt.Errorf("confining the sandbox: %w", err)
	}
	s.platform.launcher, s.platform.pidns = l, pidns
	if s.platform.caps == nil {
		s.platform.caps = allCaps()
	}
	return nil
}

func (s *session) close() {
	if s.platform != nil && s.platform.launcher != nil {
		s.platform.launcher.stop(0)
		s.platform.launcher = nil
	}
	if s.platform != nil {
		s.platform.pidns.close()
	}
}

// startExec starts an exec's process: on the ns rung from the confined
// launcher thread. Under the rlimit fallback (CommandNPROC) the process is
// started traced, stops right after its execve, gets the pids limit as its
// RLIMIT_NPROC there and is let go: everything it starts inherits that limit,
// and nothing of the sandbox ever runs with the guest's higher one.
func (s *session) startExec(cmd *exec.Cmd) error {
	if s.ownKernel() {
		err := s.startGVisorExec(cmd)
		if err == nil && s.vm != nil && testhooks.Enabled {
			// The tests' kernel panic mid-exec (testhooks.VMPanicEnv).
			vmPanicHook(cmd.Env)
		}
		return err
	}
	if s.platform == nil || s.platform.launcher == nil {
		return cmd.Start()
	}
	if err := s.enterPIDNS(cmd); err != nil {
		return err
	}
	nproc := s.cfg.CommandNPROC
	if nproc > 0 {
		cmd.SysProcAttr.Ptrace = true
	}
	maps, release, err := mapLater(cmd, s.platform.caps)
	if err != nil {
		return err
	}
	if release == nil {
		execTrampoline(cmd, s.platform.trampoline)
	} else {
		execTrampoline(cmd, s.platform.trampoline, "-w", strconv.Itoa(2+len(cmd.ExtraFiles)))
		defer release.Close()
		// Only the child has the read end.
		defer cmd.ExtraFiles[len(cmd.ExtraFiles)-1].Close()
	}
	derr := s.platform.launcher.do(func() {
		if err = cmd.Start(); err != nil || nproc == 0 {
			return
		}
		// The launcher thread is the tracer: only it may detach.
		if err = takeFirstStop(cmd.Process.Pid, nproc); err != nil {
			err = fmt.Errorf("limiting the exec's processes: %w", err)
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	if derr != nil {
		return derr
	}
	if err == nil && maps != nil {
		if err = maps.write(cmd.Process); err != nil {
			err = fmt.Errorf("mapping the exec's user namespace: %w", err)
			cmd.Process.Kill()
			cmd.Wait()
		}
	}
	return err
}

// enterPIDNS makes cmd start in the pid namespace of the session's execs
// (commandPIDNS), a new one if the last one's init is gone.
func (s *session) enterPIDNS(cmd *exec.Cmd) error {
	if err := s.renewLauncher(); err != nil {
		return err
	}
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	// Go's child checks for Pdeathsig that its parent is the one that
	// forked it by getppid, which in the namespace is 0 (the guest is
	// outside it): the child would kill itself. Not needed: the guest's
	// end closes the hold pipe, the init exits, and the namespace dies with
	// everything in it.
	cmd.SysProcAttr.Pdeathsig = 0
	if !s.platform.pidns.joined() {
		// The namespace's /proc: the init's root.
		cmd.SysProcAttr.Chroot = s.platform.pidns.chroot()
	}
	return nil
}

// idMaps is the user namespace maps a process gets after its start
// (mapLater).
type idMaps struct {
	uid, gid  []syscall.SysProcIDMap
	setgroups bool
}

// mapLater takes cmd's user namespace maps out of its attributes: the
// launcher thread of an ns session has the commands' mount namespace and
// /proc (joinMounts), where Go's fork would write them to the wrong pid's
// files. It gives cmd the read end of a pipe as its last extra file: cmd
// must start as the trampoline in its wait mode on it (cmdstub/stub.c),
// and the caller writes the maps from another thread (write) and closes
// the write end, which lets the trampoline exec the command: mapped by
// then, so that the command's exec gives it root's capabilities in its
// namespace. With no maps to write it returns nils.
func mapLater(cmd *exec.Cmd, caps []uintptr) (*idMaps, *os.File, error) {
	a := cmd.SysProcAttr
	if a == nil || a.Cloneflags&syscall.CLONE_NEWUSER == 0 || (a.UidMappings == nil && a.GidMappings == nil) {
		return nil, nil, nil
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, nil, err
	}
	m := &idMaps{uid: a.UidMappings, gid: a.GidMappings, setgroups: a.GidMappingsEnableSetgroups}
	a.UidMappings, a.GidMappings, a.GidMappingsEnableSetgroups = nil, nil, false
	// Unmapped, the trampoline's exec would take every capability the new
	// namespace gave the child, and no_new_privs would keep the command's
	// exec from giving them back: they cross it as ambient ones, which the
	// trampoline clears before it execs the command.
	a.AmbientCaps = caps
	cmd.ExtraFiles = append(cmd.ExtraFiles, r)
	return m, w, nil
}

// allCaps lists every capability this kernel has.
func allCaps() []uintptr {
	last := uintptr(unix.CAP_LAST_CAP)
	if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n > 0 {
			last = uintptr(n)
		}
	}
	caps := make([]uintptr, 0, last+1)
	for c := uintptr(0); c <= last; c++ {
		caps = append(caps, c)
	}
	return caps
}

// write writes m for process p (its number in the guest's /proc), as Go's
// fork would have: setgroups first when it is to be denied. The files are
// opened through p's /proc directory, taken while p is known to be alive:
// a number the sandbox's processes freed by killing p and took again (with
// a user namespace of their own) would otherwise get the maps.
func (m *idMaps) write(p *os.Process) error {
	dir, err := unix.Open("/proc/"+strconv.Itoa(p.Pid), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(dir)
	// Through its pidfd: p itself, not whoever has its number.
	if err := p.Signal(syscall.Signal(0)); err != nil {
		return err
	}
	put := func(name string, b []byte) error {
		fd, err := unix.Openat(dir, name, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		if _, err := unix.Write(fd, b); err != nil {
			return fmt.Errorf("writing %s: %w", name, err)
		}
		return nil
	}
	line := func(ms []syscall.SysProcIDMap) []byte {
		var b []byte
		for _, x := range ms {
			b = fmt.Appendf(b, "%d %d %d\n", x.ContainerID, x.HostID, x.Size)
		}
		return b
	}
	if m.gid != nil && !m.setgroups {
		if err := put("setgroups", []byte("deny")); err != nil {
			return err
		}
	}
	if m.uid != nil {
		if err := put("uid_map", line(m.uid)); err != nil {
			return err
		}
	}
	if m.gid != nil {
		return put("gid_map", line(m.gid))
	}
	return nil
}

// execTrampoline makes cmd start as the command stub in trampoline mode
// (cmdstub/stub.c), which unblocks every signal and execs cmd's program with
// cmd's arguments. The launcher thread blocks every signal for its life
// (blockAllSignals) and a forked child inherits the mask; Go has no hook
// between fork and exec to clear it, so a tiny program in front does. It
// costs one exec of a program of a few hundred bytes. opts go before the
// program (its wait mode: mapLater).
func execTrampoline(cmd *exec.Cmd, exe *stubExe, opts ...string) {
	args := append(append([]string(nil), exe.argv...), opts...)
	cmd.Args = append(append(args, cmd.Path), cmd.Args...)
	cmd.Path = exe.path
}

// takeViolations returns what the sandbox refused since the last call.
func (s *session) takeViolations() []wire.Violation {
	if s.platform == nil || s.platform.launcher == nil {
		return nil
	}
	return s.platform.launcher.violations()
}

// execAttr starts an exec in its own session (its own process group, no
// controlling terminal), and on the ns, gvisor and vm rungs in its own user
// namespace.
func (s *session) execAttr() *syscall.SysProcAttr {
	if s.cfg.Rung != "ns" && !s.ownKernel() {
		return &syscall.SysProcAttr{Setsid: true}
	}
	return commandAttr(&wire.TrialStart{Rootless: s.cfg.Rootless, CommandUserNS: s.cfg.CommandUserNS,
		CommandUID: s.cfg.CommandUID, CommandGID: s.cfg.CommandGID})
}

// reapOrphans collects exited processes that were reparented to the guest (PID
// 1 on the ns, gvisor and vm rungs). It runs between execs, when no child of ours is waited for.
func (s *session) reapOrphans() {
	if s.cfg.Rung != "ns" && !s.ownKernel() {
		return
	}
	for {
		pid, err := unix.Wait4(-1, nil, unix.WNOHANG, nil)
		if pid <= 0 || err != nil {
			return
		}
	}
}

// overlayStaging is the ns rung's workspace: an overlay whose lower is the
// baseline and whose upper holds what changed since, so a diff walks only the
// upper (O(changes)), reset drops it and rebase folds it into the baseline.
//
// A fork freezes the upper as a read-only layer (forkLayers): the workspace
// is then a stack, lowers over base, and the baseline the bottom baseN of it.
type overlayStaging struct {
	ws, base, upper, work string
	userXattr             bool
	forkLayers
}

func (st *overlayStaging) name() string { return "overlay" }

// mount mounts the workspace overlay. As root with redirect_dir=on, as a
// trial's overlays are (overlayBuilder.overlay): rename(2) of a baseline dir
// then works as on a real disk, and diff and rebase follow the redirects
// (walkOptions). It used to be nofollow because neither did: a renamed dir's
// children stayed in the baseline under the old name, so a diff missed them
// where the new path was an existing empty dir, and rebase lost them.
// Rootless, a user namespace refuses redirect_dir=on: the guest's supervisor
// performs such renames instead (renamer).
func (st *overlayStaging) mount() error {
	opts := "lowerdir=" + strings.Join(st.all(), ":") + ",upperdir=" + st.upper + ",workdir=" + st.work + ",metacopy=off,index=off,xino=auto"
	if st.userXattr {
		opts += ",redirect_dir=nofollow,userxattr"
	} else {
		opts += ",redirect_dir=on"
	}
	if err := unix.Mount("overlay", st.ws, "overlay", unix.MS_NODEV, opts); err != nil {
		return fmt.Errorf("mounting the workspace: %w", err)
	}
	return nil
}

// makeReadOnly makes the workspace's overlay read-only, or fails with EBUSY
// while a process holds a file of it open for writing. The overlay's
// superblock, not the mount: the execs reach the workspace through the
// copy of the mount in their own mount namespace (commandPIDNS), whose
// writers a remount of the guest's mount alone would neither see nor stop.
// The overlay is detached and mounted anew right after (remount).
func (st *overlayStaging) makeReadOnly() error {
	return unix.Mount("", st.ws, "", unix.MS_REMOUNT|unix.MS_RDONLY|unix.MS_NODEV, "")
}

// remount detaches the workspace (processes still inside keep the old view),
// runs change on the layers, and mounts it again.
func (st *overlayStaging) remount(change func() error) error {
	if err := unix.Unmount(st.ws, unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detaching the workspace: %w", err)
	}
	err := change()
	if cerr := renewDir(st.work); err == nil {
		err = cerr
	}
	if merr := st.mount(); err == nil {
		err = merr
	}
	return err
}

// walkOptions: the upper's markers are in the xattr namespace the overlay
// uses, and its redirects are followed where it has redirect_dir=on (root).
func (st *overlayStaging) walkOptions() fswalk.WalkOptions {
	return fswalk.WalkOptions{UserXattr: st.userXattr, Redirects: !st.userXattr}
}

func (st *overlayStaging) diff() (*wire.Diff, error) {
	if st.stacked() {
		return st.diffStack(st.baseN)
	}
	return diffDirs(st.ws, st.base, false, func(w *wsDiffer) error {
		return fswalk.Walk(st.upper, 0, st.walkOptions(), func(e *wire.FSEntry, _ *os.File) error {
			// A renamed dir shows another baseline dir's children than its
			// own path's, so all of them are compared, as for an opaque one.
			if e.Kind == wire.EntryDir && (e.Opaque || e.Redirect != "") {
				w.opaque[e.Path] = true
			}
			return w.path(e.Path)
		})
	})
}

func (st *overlayStaging) reset() error {
	return st.remount(func() error {
		// Layers frozen above the baseline since (by a fork) go too.
		st.lowers = st.lowers[len(st.lowers)-(st.baseN-1):]
		return renewDir(st.upper)
	})
}

func (st *overlayStaging) replace(r io.Reader) error {
	return st.remount(func() error {
		if st.stacked() {
			// The layers may be shared with branches: the new tree goes
			// in a base of its own.
			if err := st.newBase(); err != nil {
				return err
			}
		}
		if err := renewDir(st.upper); err != nil {
			return err
		}
		if err := clearDir(st.base); err != nil {
			return err
		}
		if err := extractTar(r, st.base); err != nil {
			clearDir(st.base)
			return err
		}
		return nil
	})
}

// rebase folds the upper into the baseline. Upper and baseline are on the same
// tmpfs, so new contents move by rename.
func (st *overlayStaging) rebase() error {
	if st.stacked() {
		// Shared layers are read-only: the upper is frozen on top of them
		// instead of folded in, and the baseline is the whole stack.
		if err := st.freezeUpper(); err != nil {
			return err
		}
		st.baseN = len(st.all())
		return st.flattenIfDeep()
	}
	// A file the fold renames into the baseline is the same inode a
	// process may still hold open for writing (a daemon an earlier exec
	// left): its later writes would land in the baseline, where no diff
	// (a walk of the upper) ever sees them. Making the workspace read-only
	// first fails (EBUSY) exactly while such a descriptor exists, and
	// leaves the view being detached read-only for whoever still has a cwd
	// in it. Busy, the fold copies files instead, so the held inodes leave
	// with the upper and what they are written with reaches no view.
	busy := false
	if err := st.makeReadOnly(); err != nil {
		if !errors.Is(err, unix.EBUSY) {
			return fmt.Errorf("making the workspace read-only: %w", err)
		}
		busy = true
	}
	return st.remount(func() error {
		var entries []wire.FSEntry
		err := fswalk.Walk(st.upper, 0, st.walkOptions(), func(e *wire.FSEntry, _ *os.File) error {
			entries = append(entries, *e)
			return nil
		})
		if err != nil {
			return err
		}
		// The fold below goes by paths: one the kernel refuses
		// (ENAMETOOLONG) half-way would leave the entries before it
		// folded while the caller gets an error and no diff, so they
		// would be in the baseline unseen. A command can make such a
		// path (a deep tree), so every path is checked before anything
		// moves.
		for _, e := range entries {
			for _, p := range []string{filepath.Join(st.base, e.Path), filepath.Join(st.upper, e.Path), filepath.Join(st.base, e.Redirect)} {
				if len(p) >= unix.PathMax {
					return fmt.Errorf("%w (%d bytes of path): nothing was rebased", errDeepRebase, len(e.Path))
				}
			}
		}
		moved, err := st.takeRedirected(entries)
		if err != nil {
			return err
		}
		for _, e := range entries {
			b, u := filepath.Join(st.base, e.Path), filepath.Join(st.upper, e.Path)
			switch e.Kind {
			case wire.EntryWhiteout:
				if err := os.RemoveAll(b); err != nil {
					return err
				}
			case wire.EntryDir:
				fi, err := os.Lstat(b)
				if e.Opaque || e.Redirect != "" || (err == nil && !fi.IsDir()) {
					if err := os.RemoveAll(b); err != nil {
						return err
					}
				}
				if tmp, ok := moved[e.Path]; ok {
					// A renamed dir: the baseline dir it shows comes along.
					if err := os.Rename(tmp, b); err != nil {
						return err
					}
				}
				if err := os.Mkdir(b, 0o700); err != nil && !os.IsExist(err) {
					return err
				}
				if err := os.Chmod(b, os.FileMode(e.Mode&0o777)); err != nil {
					return err
				}
			default:
				if err := os.RemoveAll(b); err != nil {
					return err
				}
				if busy && e.Kind == wire.EntryFile {
					if err := copyDetached(u, b); err != nil {
						return err
					}
					continue
				}
				if err := os.Rename(u, b); err != nil {
					return err
				}
			}
		}
		if err := os.RemoveAll(st.rebaseTmp()); err != nil {
			return err
		}
		return renewDir(st.upper)
	})
}

// rebaseTmp holds, during a rebase, the baseline dirs that renamed dirs show:
// beside the baseline on the same tmpfs, where no name of the workspace is.
func (st *overlayStaging) rebaseTmp() string { return filepath.Join(filepath.Dir(st.base), "rebase") }

// takeRedirected moves the baseline dir each renamed dir of entries shows
// (its redirect) aside, before anything else of the baseline changes: the
// whiteout at its old path would delete it, and a later rename may have
// reused that path. The deepest go first, so that one inside another moves
// on its own. It returns where each went, by the renamed dir's path.
func (st *overlayStaging) takeRedirected(entries []wire.FSEntry) (map[string]string, error) {
	var rs []wire.FSEntry
	for _, e := range entries {
		if e.Kind == wire.EntryDir && e.Redirect != "" {
			rs = append(rs, e)
		}
	}
	if len(rs) == 0 {
		return nil, nil
	}
	slices.SortStableFunc(rs, func(a, b wire.FSEntry) int {
		return strings.Count(b.Redirect, "/") - strings.Count(a.Redirect, "/")
	})
	tmp := st.rebaseTmp()
	if err := os.RemoveAll(tmp); err != nil {
		return nil, err
	}
	if err := os.Mkdir(tmp, 0o700); err != nil {
		return nil, err
	}
	moved := map[string]string{}
	for i, e := range rs {
		to := filepath.Join(tmp, strconv.Itoa(i))
		if err := os.Rename(filepath.Join(st.base, e.Redirect), to); err != nil {
			return nil, fmt.Errorf("rebase: the baseline of renamed dir %q: %w", e.Path, err)
		}
		moved[e.Path] = to
	}
	return moved, nil
}

// copyDetached copies the regular file u to the new file b, with its
// owner, mode and times: a copy no descriptor opened on u writes to.
// (Hard links among such files become separate files: only while a
// process holds a workspace file open for writing.)
func copyDetached(u, b string) error {
	in, err := os.Open(u)
	if err != nil {
		return err
	}
	defer in.Close()
	var st unix.Stat_t
	if err := unix.Fstat(int(in.Fd()), &st); err != nil {
		return err
	}
	out, err := os.OpenFile(b, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	fd := int(out.Fd())
	if err == nil {
		err = unix.Fchown(fd, int(st.Uid), int(st.Gid))
	}
	if err == nil {
		// After the chown, which clears setuid and setgid.
		err = unix.Fchmod(fd, st.Mode&0o7777)
	}
	if err == nil {
		err = unix.UtimesNanoAt(unix.AT_FDCWD, b, []unix.Timespec{st.Atim, st.Mtim}, unix.AT_SYMLINK_NOFOLLOW)
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

func setNotDumpable() { unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0) }

// clearDir removes everything inside dir, keeping dir.
func clearDir(dir string) error {
	r, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer r.Close()
	return clearRoot(r)
}

// errDeepRebase: a path of the workspace is too long for the rebase's fold.
var errDeepRebase = errors.New("a path of the workspace is too deep to rebase")

// renewDir empties a layer dir by replacing it with a new one. A process
// still inside the detached old view (a cwd, a name the overlay cached) is
// left with the removed dir, where nothing can be made any more, instead of
// writing on into the dir the new view uses, behind that view's cache (its
// diff would then compare stale names and miss the change).
func renewDir(dir string) error {
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	return os.Mkdir(dir, 0o755)
}

// diffDirs is a diff of the trees at the paths cur and base, opened for
// its length: what diff takes, then each root's Close.
func diffDirs(cur, base string, scan bool, diff func(*wsDiffer) error) (*wire.Diff, error) {
	cr, err := os.OpenRoot(cur)
	if err != nil {
		return nil, err
	}
	defer cr.Close()
	br, err := os.OpenRoot(base)
	if err != nil {
		return nil, err
	}
	defer br.Close()
	w := newWSDiffer(cr, br, scan)
	if err := diff(w); err != nil {
		return nil, err
	}
	return w.result(), nil
}
