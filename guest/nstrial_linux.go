package guest

import (
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/fswalk"
	"github.com/dryexec/dryexec/wire"
)

// scratchCandidates are where the trial's tmpfs (upper dirs, work dirs, the new
// root) is mounted in the trial's private mount namespace before pivot_root; the
// host never sees it. The first existing directory wins. /dev/shm comes first
// because nothing beneath /dev is ever an overlay's lower.
var scratchCandidates = []string{"/dev/shm", "/dev", "/tmp"}

// runNSTrial is PID 1 of a one-shot ns trial. The host started it in fresh user,
// mount, pid, net, ipc, uts and cgroup namespaces with the descriptors in package
// wire's *FD constants.
func runNSTrial() int {
	ctrl := os.NewFile(wire.CtrlFD, "ctrl")
	conn := wire.NewConn(ctrl)
	fail := func(code string, err error) int { return sendFailure(conn, code, err) }
	cfg, code, ok := greet(conn, wire.RoleNSTrial)
	if !ok {
		return code
	}
	dev, err := sendTUN(&cfg)
	if err != nil {
		return fail("net", err)
	}
	scratch, uppers, err := buildView(&cfg, false)
	if err != nil {
		return fail("setup", err)
	}
	l, err := startConfined(cfg.Rootless, cfg.LauncherCgroups)
	if err != nil {
		return fail("setup", fmt.Errorf("confining the sandbox: %w", err))
	}
	if err := conn.Send(wire.KindEvent, wire.VerbTrialMounts, 0, &wire.TrialMounts{Paths: uppers, ScratchFD: scratch}); err != nil {
		return 1
	}
	// The rest runs on the launcher thread: it starts the stub, traces it
	// (ptrace binds a tracee to one thread), waits for the command and
	// reports from there, so that no hand-off between threads (≈ 0.1–0.2 ms
	// each here) is on the trial's path.
	code = 1
	if err := l.l.do(func() { code = serveTrial(conn, &cfg, l, scratch, uppers, dev) }); err != nil {
		return fail("setup", fmt.Errorf("confining the sandbox: %w", err))
	}
	l.conf.close()
	l.l.stop(time.Second)
	return code
}

// serveTrial waits for the command, runs it and reports: trial.exit, the
// upper dirs' entries, trial.done. It runs on the launcher thread l.
func serveTrial(conn *wire.Conn, cfg *wire.TrialStart, l *confinedLauncher, scratch int, uppers []string, dev *lazyTUN) int {
	fail := func(code string, err error) int { return sendFailure(conn, code, err) }
	f, err := conn.Read()
	if err != nil {
		return 1
	}
	if f.Verb != wire.VerbTrialJoined {
		return fail("protocol", fmt.Errorf("expected %s, got %q", wire.VerbTrialJoined, f.Verb))
	}
	// In the trial's cgroups now, the guest starts the command's process,
	// which waits for the command (see cmdStub).
	var mt *memTracer
	if !cfg.NoMemoryTrace {
		mt = &memTracer{}
	}
	stub, err := startTrialStub(cfg, mt, l.conf.nested, "")
	if err != nil {
		return fail("setup", err)
	}
	// The codecs of what the trial's own frames carry are built now, while
	// a pooled sandbox waits, rather than at trial.run.
	wire.Prime(&wire.TrialRun{}, &wire.TrialExit{Memory: &wire.MemoryUse{}, Violations: []wire.Violation{{}}}, &wire.FSEntry{}, &wire.TrialDone{})
	// The sandbox is ready: a warm pool keeps it so until a trial is asked
	// for (the host closing the stream ends it), a cold trial sends the
	// command at once. The host writes the command to the stub, then sends
	// trial.run. A reader, waiting from now on, takes trial.run and then
	// watches the stream, while this thread waits for the command already:
	// at the trial's start only the stub and the reader wake, and no thread
	// is started (a new one cost ≈ 0.04 ms of a warm /bin/true here).
	ran := make(chan runStarted, 1)
	timedOut := make(chan struct{})
	go readRun(conn, cfg, ran, timedOut, nil)
	// settled runs once no sandbox process can act any more: what the
	// supervisor refused is all reported by then, and the upper dirs hold
	// all that will be written. It sends trial.exit and the upper dirs'
	// entries.
	var walkErr error
	settled := func(exit *wire.TrialExit) error {
		exit.Violations = l.l.violations()
		var sfs unix.Statfs_t
		if unix.Fstatfs(scratch, &sfs) == nil {
			exit.UpperUsed = int64(sfs.Blocks-sfs.Bfree) * sfs.Bsize
			exit.UpperFull = sfs.Bavail == 0 || sfs.Ffree == 0
		}
		if err := dev.flush(); err != nil {
			return err
		}
		if err := conn.Send(wire.KindEvent, wire.VerbTrialExit, 0, exit); err != nil {
			return err
		}
		walkErr = walkUppers(conn, scratch, len(uppers), cfg.Rootless)
		return walkErr
	}
	if cfg.Pooled {
		// A pooled sandbox waits: collect now what building the view left
		// behind, so that the trial's own allocations (its reports, the
		// walk) reuse memory this process has already touched instead of
		// taking fresh pages, each a page fault (≈ 11 µs on a
		// paravirtualised VM): ≈ 50 of them in a pooled /bin/true's guest
		// without it, ≈ 23 with it (docs/benchmarks.md). The heap stays far
		// below the runtime's 4 MiB minimum goal, so no collection runs by
		// itself during the trial.
		runtime.GC()
	}
	// The stub waits for its command: the host may count the sandbox
	// settled (wire.VerbTrialReady).
	if err := conn.Send(wire.KindEvent, wire.VerbTrialReady, 0, nil); err != nil {
		stub.kill()
		return 1
	}
	done, err := runCommand(cfg, stub, mt, ran, timedOut, settled, true)
	if walkErr != nil {
		return fail("walk", walkErr)
	}
	if err != nil {
		return 1
	}
	if err := conn.Send(wire.KindEvent, wire.VerbTrialDone, 0, done); err != nil {
		return 1
	}
	return 0
}

// walkUppers sends an fs.entry (and the content) for each entry of the n
// upper dirs, u/0 … beneath scratch.
func walkUppers(conn *wire.Conn, scratch, n int, rootless bool) error {
	if err := unix.Fchdir(scratch); err != nil {
		return err
	}
	// Made at the first file to send: a trial that wrote none does not pay
	// for a megabyte's page faults.
	var buf []byte
	for i := range n {
		// Only the xattr namespace the overlays use is read: as root that is
		// trusted.*, and user.* is the command's own to set. As root the
		// overlays have redirect_dir=on (overlayBuilder.overlay).
		o := fswalk.WalkOptions{UserXattr: rootless, Redirects: !rootless}
		err := fswalk.Walk("u/"+strconv.Itoa(i), i, o, func(e *wire.FSEntry, content *os.File) error {
			if err := conn.Send(wire.KindEvent, wire.VerbFSEntry, 0, e); err != nil {
				return err
			}
			if content == nil {
				return nil
			}
			if buf == nil {
				buf = make([]byte, wire.MaxAttachment)
			}
			return sendContent(conn, content, e.Size, buf)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// runStarted is what readRun hands runCommand once trial.run is in cfg.
type runStarted struct {
	// at is when the command started, on wire.MonoNow's clock: when the
	// host wrote it (StartMonoNS), else when trial.run came.
	at    int64
	timer *time.Timer // the timeout's, nil without one
}

// readRun reads trial.run into cfg.TrialRun, arms the timeout (closing
// timedOut and killing every sandbox process when it fires), hands over on
// ran, then reads on: the stream only closes from then on (the host done with
// the trial, or dead), and PID 1 exits then, which kills all that is left in
// the namespace. A stream closed before trial.run (a pool dropping its ready
// sandbox) or a bad trial.run ends the guest too: the host may have written
// a command to the stub already. Frames after trial.run go to answers (the
// host's answers to the guest's own requests), nil: none are expected.
func readRun(conn *wire.Conn, cfg *wire.TrialStart, ran chan<- runStarted, timedOut chan struct{}, answers func(*wire.Frame)) {
	f, err := conn.Read()
	if err != nil {
		os.Exit(1)
	}
	if f.Verb != wire.VerbTrialRun {
		err = fmt.Errorf("expected %s, got %q", wire.VerbTrialRun, f.Verb)
	} else if err = f.Decode(&cfg.TrialRun); err == nil && (len(cfg.Argv) == 0 || cfg.Argv[0] == "") {
		err = errors.New("trial.run without a command")
	}
	if err != nil {
		os.Exit(sendFailure(conn, "protocol", err))
	}
	s := runStarted{at: cfg.StartMonoNS}
	if s.at == 0 {
		s.at = wire.MonoNow()
	}
	if cfg.TimeoutMS > 0 {
		s.timer = time.AfterFunc(time.Duration(cfg.TimeoutMS)*time.Millisecond, func() {
			close(timedOut)
			unix.Kill(-1, unix.SIGKILL)
		})
	}
	ran <- s
	for {
		f, err := conn.Read()
		if err != nil {
			os.Exit(3)
		}
		if answers != nil {
			answers(f)
		}
	}
}

// sendFailure reports a guest-side failure (a KindErr frame) and returns
// the guest's exit code for it.
func sendFailure(conn *wire.Conn, code string, err error) int {
	conn.Send(wire.KindErr, "", 0, &wire.RemoteError{Code: code, Message: err.Error()})
	return 1
}

// sendContent streams exactly size bytes of f: its data as fs.data frames,
// its holes (SEEK_DATA/SEEK_HOLE) as fs.hole frames, so that a sparse file
// costs the stream (and the host's store) only what it holds: `truncate -s
// 100G` is one frame. A file that changed size under us (it cannot: every
// sandbox process is dead) is an error.
func sendContent(conn *wire.Conn, f *os.File, size int64, buf []byte) error {
	// A file that fits one frame goes as data without looking for holes:
	// most files a trial writes are small, the two lseeks per file were on
	// every trial's walk, and holes within one frame cost the stream at most
	// that frame (the store keeps zero blocks as holes anyway).
	if size == 0 {
		return nil
	}
	if size <= int64(len(buf)) {
		if _, err := f.ReadAt(buf[:size], 0); err != nil {
			return fmt.Errorf("reading upper file: %w", err)
		}
		return conn.Send(wire.KindEvent, wire.VerbFSData, 0, nil, buf[:size])
	}
	fd := int(f.Fd())
	for off := int64(0); off < size; {
		data, err := unix.Seek(fd, off, unix.SEEK_DATA)
		switch {
		case errors.Is(err, unix.ENXIO): // no data from off on: a hole to the end
			data = size
		case err != nil: // no SEEK_DATA here: all of it is data
			data = off
		}
		if data > size {
			data = size
		}
		if data > off {
			if err := conn.Send(wire.KindEvent, wire.VerbFSHole, 0, &wire.FSHole{N: data - off}); err != nil {
				return err
			}
			off = data
			continue
		}
		end, err := unix.Seek(fd, off, unix.SEEK_HOLE)
		if err != nil || end > size || end <= off {
			end = size
		}
		for off < end {
			n := min(int64(len(buf)), end-off)
			if _, err := f.ReadAt(buf[:n], off); err != nil {
				return fmt.Errorf("reading upper file: %w", err)
			}
			if err := conn.Send(wire.KindEvent, wire.VerbFSData, 0, nil, buf[:n]); err != nil {
				return err
			}
			off += n
		}
	}
	return nil
}

// buildView makes the sandbox's filesystem: an overlay over every host mount the
// host listed, fresh /proc, a minimal /dev, read-only /sys; then pivot_root into
// it. It returns an fd of the scratch tmpfs that holds the upper dirs (reachable
// only through that fd afterwards) and the host path each upper dir stands for.
//
// With keep, the scratch tmpfs stays attached to the new tree, at /dev/.dryexec
// under an empty read-only tmpfs that hides it: a session must mount overlays
// over its layers later, and overlayfs refuses layers on a detached mount. The
// returned fd then refers to that hidden, attached mount.
func buildView(cfg *wire.TrialStart, keep bool) (int, []string, error) {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return -1, nil, fmt.Errorf("making mounts private: %w", err)
	}
	var locked map[string]bool
	if cfg.Rootless {
		// Every mount copied into a user namespace's mount namespace is locked
		// to its parent, and overlayfs refuses a lower with locked mounts
		// beneath it; such lowers are split (see overlayBuilder.dir).
		infos, err := mountinfo.GetMounts(nil)
		if err != nil {
			return -1, nil, fmt.Errorf("reading mountinfo: %w", err)
		}
		locked = make(map[string]bool, len(infos))
		for _, mi := range infos {
			locked[mi.Mountpoint] = true
		}
	}
	scratchDir := ""
	for _, c := range scratchCandidates {
		if st, err := os.Lstat(c); err == nil && st.IsDir() {
			scratchDir = c
			break
		}
	}
	if scratchDir == "" {
		return -1, nil, errors.New("no directory to mount the scratch tmpfs on")
	}
	opts := "mode=0700"
	if cfg.UpperSize > 0 {
		opts += ",size=" + strconv.FormatInt(cfg.UpperSize, 10)
	}
	if err := unix.Mount("dryexec", scratchDir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return -1, nil, fmt.Errorf("mounting scratch tmpfs: %w", err)
	}
	scratch, err := unix.Open(scratchDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, nil, fmt.Errorf("opening scratch: %w", err)
	}
	for _, d := range []string{"root", "u", "w", "s"} {
		if err := os.Mkdir(scratchDir+"/"+d, 0o755); err != nil {
			return -1, nil, err
		}
	}
	root := scratchDir + "/root"
	b := &overlayBuilder{scratch: scratchDir, root: root, rootless: cfg.Rootless, locked: locked}
	if len(cfg.Image) > 0 {
		// The image's layers are the one lower of "/": nothing of the
		// host's filesystem is in the view.
		if err := b.image(cfg.Image); err != nil {
			return -1, nil, err
		}
	}
	for _, m := range cfg.Mounts {
		if len(cfg.Image) > 0 {
			break
		}
		if err := b.dir(m.Path); err != nil && !(errors.Is(err, errVanished) && m.Path != "/") {
			return -1, nil, err
		}
	}
	if err := mountProcDevSys(root, cfg.Rootless); err != nil {
		return -1, nil, err
	}
	if err := mountMasks(scratchDir, root, cfg.Masks, cfg.Hidden, cfg.Rootless); err != nil {
		return -1, nil, err
	}
	if err := bindNetFiles(cfg, scratchDir, root); err != nil {
		return -1, nil, err
	}
	if keep {
		hidden := root + "/dev/.dryexec"
		if err := os.Mkdir(hidden, 0o700); err != nil {
			return -1, nil, err
		}
		if err := unix.Mount(scratchDir, hidden, "", unix.MS_BIND, ""); err != nil {
			return -1, nil, fmt.Errorf("keeping the scratch tmpfs: %w", err)
		}
		kept, err := unix.Open(hidden, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, nil, err
		}
		if err := unix.Mount("none", hidden, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0,mode=0000"); err != nil {
			return -1, nil, fmt.Errorf("hiding the scratch tmpfs: %w", err)
		}
		unix.Close(scratch)
		scratch = kept
	}
	if err := unix.Chdir(root); err != nil {
		return -1, nil, err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return -1, nil, fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return -1, nil, fmt.Errorf("detaching old root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return -1, nil, err
	}
	if cfg.Hostname != "" {
		unix.Sethostname([]byte(cfg.Hostname))
	}
	if err := loopbackUp(); err != nil {
		return -1, nil, err
	}
	return scratch, b.uppers, nil
}

// devNodes are the only devices a sandbox gets, with their numbers.
var devNodes = []struct {
	name         string
	major, minor uint32
}{{"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0}}

// mountProcDevSys mounts /proc (this pid namespace's), a minimal /dev, and sysfs
// read-only when the kernel lets this namespace mount it. As root the device nodes
// are made with mknod (a syscall, where a bind mount costs a mount each);
// rootless they are the host's, bound in.
func mountProcDevSys(root string, rootless bool) error {
	const noSuidDevExec = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	if err := unix.Mount("proc", root+"/proc", "proc", noSuidDevExec, ""); err != nil {
		return fmt.Errorf("mounting /proc: %w", err)
	}
	dev := root + "/dev"
	if err := unix.Mount("dev", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=65536"); err != nil {
		return fmt.Errorf("mounting /dev: %w", err)
	}
	for _, n := range devNodes {
		p := dev + "/" + n.name
		if !rootless {
			if err := unix.Mknod(p, unix.S_IFCHR|0o666, int(unix.Mkdev(n.major, n.minor))); err != nil {
				return fmt.Errorf("mknod /dev/%s: %w", n.name, err)
			}
			// mknod applies the umask.
			if err := unix.Chmod(p, 0o666); err != nil {
				return err
			}
			continue
		}
		if err := os.WriteFile(p, nil, 0o666); err != nil {
			return err
		}
		if err := unix.Mount("/dev/"+n.name, p, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("binding /dev/%s: %w", n.name, err)
		}
	}
	for _, d := range []string{"pts", "shm"} {
		if err := os.Mkdir(dev+"/"+d, 0o755); err != nil {
			return err
		}
	}
	if err := unix.Mount("devpts", dev+"/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620"); err != nil {
		return fmt.Errorf("mounting /dev/pts: %w", err)
	}
	if err := unix.Mount("shm", dev+"/shm", "tmpfs", noSuidDevExec, "mode=1777"); err != nil {
		return fmt.Errorf("mounting /dev/shm: %w", err)
	}
	for name, target := range map[string]string{
		"ptmx": "pts/ptmx", "fd": "/proc/self/fd", "stdin": "/proc/self/fd/0",
		"stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2",
	} {
		if err := os.Symlink(target, dev+"/"+name); err != nil {
			return err
		}
	}
	// Best effort: without it /sys is the host root fs's empty mount point dir.
	unix.Mount("sysfs", root+"/sys", "sysfs", noSuidDevExec|unix.MS_RDONLY, "")
	return lockProc(root, dev+"/null")
}

func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket for lo: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("reading lo flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bringing lo up: %w", err)
	}
	return nil
}

// confinedLauncher is a confined launcher thread (see launcher) with its
// seccomp supervisor, ready before the command is known: a pooled sandbox
// keeps one waiting.
type confinedLauncher struct {
	conf *confinement
	l    *launcher
}

func startConfined(rootless bool, cgroups []int) (*confinedLauncher, error) {
	conf, err := newConfinement(rootless)
	if err != nil {
		closeFDs(cgroups)
		return nil, err
	}
	if len(cgroups) > 0 {
		// A trial's launcher is started once: the files go with it.
		conf.prepare = func() error {
			defer closeFDs(cgroups)
			return enterCgroups(cgroups)
		}
	}
	l, err := startLauncher(conf)
	if err != nil {
		conf.close()
		return nil, err
	}
	return &confinedLauncher{conf: conf, l: l}, nil
}

// startTrialStub starts the trial's command stub, with the host's request
// pipe (wire.StubFD), traced by mt (when not nil), entering the Landlock
// ruleset nested (when not -1) before the command, with root (when not "")
// as its root directory (a gvisor command's pid namespace's: commandPIDNS);
// it runs on the launcher thread. The guest's copies of the trial's pipes
// are closed then: only the command holds them, so the host sees EOF as
// soon as the last sandbox process is gone.
func startTrialStub(cfg *wire.TrialStart, mt *memTracer, nested int, root string) (*cmdStub, error) {
	stdin := ^uintptr(0) // none: the stub closes its fd 5
	if _, err := unix.FcntlInt(wire.StdinFD, unix.F_GETFD, 0); err == nil {
		stdin = wire.StdinFD
	}
	start := func(exe *stubExe) (*cmdStub, error) {
		attr := commandAttr(cfg)
		attr.Chroot = root
		return startStub(exe, attr, cfg.CommandNPROC, wire.StdoutFD, wire.StderrFD, wire.StubFD, stdin, uintptr(nested), mt)
	}
	exe := newStubExe()
	stub, err := start(exe)
	if err != nil && exe.native() {
		// A kernel or security module that refuses to exec a memfd: the
		// guest binary plays the stub.
		stub, err = start(guestStubExe())
	}
	if err != nil {
		return nil, err
	}
	for _, fd := range []int{wire.StdoutFD, wire.StderrFD, wire.StubFD, int(stdin)} {
		if fd >= 0 {
			unix.Close(fd)
		}
	}
	return stub, nil
}

// runCommand waits for the command the host sends the stub, then kills and
// reaps everything else in the pid namespace, so that nothing outlives the
// trial. It waits from before the command is sent: trial.run comes on ran
// (readRun), and is awaited only when the command has ended. mt, when not
// nil, traces it. It calls settled with how the command ended as soon as no
// process of the sandbox can act any more, so that every write is in the
// upper dirs: when the command, traced, stops at its exit as the last one
// alive (it is let go, and reaped after settled returns), else once
// everything is reaped. It returns what is known only after the reaping.
// With hostDates (the ns guest: it shares the host's clock), a command
// that ends before trial.run has been read is reported with its end
// (EndMonoNS) for the host to date, rather than after a wait for the
// reader.
func runCommand(cfg *wire.TrialStart, stub *cmdStub, mt *memTracer, ran <-chan runStarted, timedOut <-chan struct{}, settled func(*wire.TrialExit) error, hostDates bool) (*wire.TrialDone, error) {
	pid := stub.pid
	var st *runStarted
	began := func() int64 {
		if st == nil {
			s := <-ran
			st = &s
		}
		return st.at
	}
	// read says whether trial.run has been read, without waiting for it.
	read := func() bool {
		if st == nil {
			select {
			case s := <-ran:
				st = &s
			default:
			}
		}
		return st != nil
	}
	defer func() {
		if st != nil && st.timer != nil {
			st.timer.Stop()
		}
	}()
	// exited builds the report from the command's wait status and when it
	// ended (wire.MonoNow).
	exited := func(ws unix.WaitStatus, end int64) *wire.TrialExit {
		ex := &wire.TrialExit{EndMonoNS: end}
		if err := stub.startError(); err != nil {
			// The message names the command: trial.run's.
			ex.DurationNS = max(end-began(), 0)
			ex.ExitCode, ex.StartError = startFailure(cfg, err)
			return ex
		}
		// Without trial.run no timeout was armed either: the command did
		// not time out.
		if read() || !hostDates {
			ex.DurationNS = max(end-began(), 0)
		}
		if mt != nil {
			ex.Memory = mt.result()
		}
		select {
		case <-timedOut:
			ex.TimedOut = true
		default:
		}
		switch {
		case ex.TimedOut:
			ex.ExitCode, ex.Signal = 124, "SIGKILL"
		case ws.Signaled():
			ex.ExitCode, ex.Signal = 128+int(ws.Signal()), unix.SignalName(ws.Signal())
		default:
			ex.ExitCode = ws.ExitStatus()
		}
		return ex
	}
	reported := false
	var ws unix.WaitStatus
	for {
		wpid, err := unix.Wait4(-1, &ws, unix.WALL, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			break
		}
		if ws.Stopped() {
			last := mt != nil && !reported && wpid == pid && ws.TrapCause() == unix.PTRACE_EVENT_EXIT && mt.lastAlive(pid)
			var status uint
			if last {
				status, err = unix.PtraceGetEventMsg(pid)
				last = err == nil
			}
			if mt != nil {
				mt.stopped(wpid, ws)
			}
			if last {
				// Let go, the command runs the kernel's side of its exit
				// (unmapping, closing) on one CPU while the report and the
				// walk go on another: neither changes what is in the upper
				// dirs (io_uring, which could finish a write later, is
				// refused by the seccomp profile).
				if err := settled(exited(unix.WaitStatus(status), wire.MonoNow())); err != nil {
					return nil, err
				}
				reported = true
			}
			continue
		}
		if mt != nil {
			mt.gone(wpid)
		}
		if wpid == pid {
			break
		}
	}
	end := wire.MonoNow()
	// Whatever the command left running (daemons, background jobs) dies now.
	unix.Kill(-1, unix.SIGKILL)
	for {
		var rws unix.WaitStatus
		wpid, err := unix.Wait4(-1, &rws, unix.WALL, nil)
		if err == unix.ECHILD {
			break
		}
		if err == nil && rws.Stopped() && mt != nil {
			mt.stopped(wpid, rws) // resumed, it dies of the SIGKILL
		}
	}
	if !reported {
		if err := settled(exited(ws, end)); err != nil {
			return nil, err
		}
	}
	// trial.run is read by now (its timeout, if any, then stops below):
	// the host sent it right after the command.
	began()
	done := &wire.TrialDone{}
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_CHILDREN, &ru) == nil {
		// The stub's own time before the command (exited read its report)
		// is not the command's.
		done.CPUUserNS = max(ru.Utime.Nano()-stub.ownUser.Nanoseconds(), 0)
		done.CPUSysNS = max(ru.Stime.Nano()-stub.ownSys.Nanoseconds(), 0)
		done.MaxRSS = ru.Maxrss * 1024
	}
	return done, nil
}

// commandAttr starts the command in its own session (no controlling terminal to
// push input into) and, when asked, in its own identity-mapped user namespace.
func commandAttr(cfg *wire.TrialStart) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setsid: true}
	switch {
	case cfg.CommandUserNS && cfg.Rootless:
		a.Cloneflags = syscall.CLONE_NEWUSER
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: cfg.CommandUID, HostID: 0, Size: 1}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: cfg.CommandGID, HostID: 0, Size: 1}}
		a.GidMappingsEnableSetgroups = false
	case cfg.CommandUserNS:
		all := []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1<<32 - 1}}
		a.Cloneflags = syscall.CLONE_NEWUSER
		a.UidMappings, a.GidMappings = all, all
	}
	return a
}

// startFailure is the exit code and message of a command the stub could not
// start, as a shell gives them: 127 for a program not found, 126 for one
// that cannot run.
func startFailure(cfg *wire.TrialStart, err error) (int, string) {
	prog := cfg.Argv[0]
	var se *stubError
	switch {
	case errors.As(err, &se) && se.Stage == stubStageChdir:
		return 126, fmt.Sprintf("cwd %s: %v", cfg.Cwd, se.Errno)
	case errors.Is(err, unix.ENOENT) && !strings.Contains(prog, "/"):
		return 127, prog + ": command not found"
	case errors.Is(err, unix.ENOENT):
		return 127, prog + ": no such file or directory"
	case errors.Is(err, unix.EACCES):
		return 126, prog + ": permission denied"
	}
	return 126, fmt.Sprintf("exec %s: %v", prog, err)
}

// greet says hello as role on conn and reads the trial.start that follows
// (with the trust bundle, when the host sent one). When ok is false the
// trial cannot go on and code is the process's exit status: 1 when the host
// is gone, else what sendFailure gave after telling it why.
func greet(conn *wire.Conn, role string) (cfg wire.TrialStart, code int, ok bool) {
	if err := conn.Send(wire.KindHello, "", 0, &wire.Hello{Version: wire.Version, Role: role}); err != nil {
		return cfg, 1, false
	}
	f, err := conn.Read()
	if err != nil {
		return cfg, 1, false
	}
	if f.Verb != wire.VerbTrialStart {
		return cfg, sendFailure(conn, "protocol", fmt.Errorf("expected %s, got %q", wire.VerbTrialStart, f.Verb)), false
	}
	if err := f.Decode(&cfg); err != nil {
		return cfg, sendFailure(conn, "protocol", err), false
	}
	if len(f.Bin) > 0 {
		cfg.TrustBundle = f.Bin[0]
	}
	return cfg, 0, true
}

// enterCgroups moves the calling thread, the launcher, into the sandbox's
// limited cgroups alone: fds are the groups' v1 tasks files, which the host
// opened (wire.TrialStart's and wire.SessionStart's LauncherCgroups). The
// rest of the guest was born outside those limits
// (cgroup.Group.SpawnSheltered), and everything the launcher starts from
// now on is born inside them. A thread that moves
// itself does not wait for the kernel's RCU grace period, which moving the
// guest from the host does (≈ 6–13 ms on an idle cgroup v1 host). The
// launcher then takes a cgroup namespace of its own rooted where it now
// is, so that a command sees "/" as its group on every hierarchy, as it
// would on a cgroup v2 host, rather than a path through the shelter. It runs
// before the launcher's filter, which refuses namespaces. The files stay
// open: a session renews its launcher (renewLauncher), which enters again.
func enterCgroups(fds []int) error {
	for _, fd := range fds {
		if _, err := unix.Write(fd, []byte("0")); err != nil {
			return fmt.Errorf("entering the sandbox's cgroup (fd %d): %w", fd, err)
		}
	}
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return fmt.Errorf("a cgroup namespace for the commands: %w", err)
	}
	return nil
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		unix.Close(fd)
	}
}
