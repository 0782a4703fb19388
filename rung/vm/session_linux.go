package vm

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/rung/internal/viewtrial"
	"github.com/dryexec/dryexec/rung/linuxns"
	"github.com/dryexec/dryexec/wire"
)

var _ dryexec.SessionRung[wire.SessionStart] = (*Rung)(nil)

// OpenSandbox implements dryexec.SessionRung: the session's guest runs in
// a microVM of its own, booted as a trial's is (the same view over 9p,
// masks pinned through the host's handle, the wire on virtio-serial), its
// init starting `guest session` instead of the trial guest. The workspace
// is a tmpfs of the VM's own with its baseline beside it (scan staging, as
// on gvisor); writes elsewhere land in the view's upper dirs on the host
// and go with the sandbox. Its sandboxes park (Park, Rung.Resume) and fork
// by their VM's memory (Snapshot, then n Resumes: park_linux.go), not as
// SandboxForkers.
func (r *Rung) OpenSandbox(ctx context.Context, spec dryexec.SandboxSpec) (dryexec.Sandbox[wire.SessionStart], error) {
	s, err := r.openSession(ctx, spec, nil, nil)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// openSession starts a session's VM for spec: booted, or, with saved,
// restored from a parked one (Resume; its files are the sandbox's from
// then on), on an image with the erofs drive erofs identifies (nil: none).
func (r *Rung) openSession(ctx context.Context, spec dryexec.SandboxSpec, saved *savedVM, erofs *erofsID) (*sessionSandbox, error) {
	t, err := r.newTrial(ctx, dryexec.TrialSpec{TrialID: spec.ID, Limits: spec.Limits, Masks: spec.Masks,
		NoDefaultMasks: spec.NoDefaultMasks, OwnPaths: spec.OwnPaths, Net: spec.Net, NetCADir: spec.NetCADir, Image: spec.Image})
	if err != nil {
		if saved != nil {
			closeAll(saved.files)
		}
		return nil, err
	}
	t.session = true
	t.saved = saved
	s := &sessionSandbox{t: t, ws: cmpOr(spec.Workspace, "/workspace")}
	// On an image, the VM's root is its own overlay over the image's erofs
	// drive, as a trial's (ociimage_linux.go); the workspace is the
	// session guest's tmpfs over it, as on the host's view.
	if err := t.openImage(ctx); err != nil {
		s.Close()
		return nil, err
	}
	if err := t.checkErofs(erofs); err != nil {
		s.Close()
		return nil, err
	}
	if err := t.start(); err != nil {
		s.Close()
		return nil, err
	}
	up := s.boot
	if saved != nil {
		up = s.restore
	}
	if err := up(ctx); err != nil {
		s.Close()
		return nil, err
	}
	// The session's network is a trial's (newTrial started netsim, start
	// and prepare wired QEMU's NIC and the view's trust files): netsim must
	// be ready before the first exec, and a configuration it refuses (a
	// mock file that does not compile) is the caller's ErrBadAction.
	if err := t.net.ready(ctx); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// boot builds the view, has the view guest become QEMU, and waits, within
// BootTimeout and WalkGrace as a trial's boot, until the session guest's
// first bytes (its hello) are there to read, without taking them: the
// session reads the hello itself. Cancelling ctx meanwhile kills QEMU.
func (s *sessionSandbox) boot(ctx context.Context) error {
	t := s.t
	limit := t.r.bootTimeout() + t.r.walkGrace()
	stop := context.AfterFunc(ctx, t.Kill)
	defer stop()
	if err := t.prepare(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("opening a vm session: %w", context.Cause(ctx))
		}
		return err
	}
	err := waitReadable(t.ports[0], t.bootStart.Add(limit))
	if ctx.Err() != nil {
		return fmt.Errorf("opening a vm session: %w", context.Cause(ctx))
	}
	if errors.Is(err, os.ErrDeadlineExceeded) {
		t.Kill()
		return t.GuestErr("booting the session's VM", fmt.Errorf("no hello within %v", limit))
	}
	if err != nil {
		return t.GuestErr("booting the session's VM", err)
	}
	t.boot = time.Since(t.bootStart)
	t.r.trace("hello")
	return nil
}

// waitReadable waits until f has something to read (or its end) by
// peeking at it, before deadline: nothing is consumed.
func waitReadable(f *os.File, deadline time.Time) error {
	if err := f.SetReadDeadline(deadline); err != nil {
		return err
	}
	defer f.SetReadDeadline(time.Time{})
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var perr error
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, e := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		if e == unix.EAGAIN || e == unix.EINTR {
			return false
		}
		perr = e
		return true
	})
	if err != nil {
		return err
	}
	return perr
}

// sessionSandbox is a vm session's sandbox: QEMU running the session guest
// over the view, with the masks the host pinned.
type sessionSandbox struct {
	t     *trial
	ws    string
	close sync.Once
	q     *qmp // QEMU's monitor, once parking needed it (park_linux.go)
	// ramHits are the OOM kills of the VM's kernel the guest counted
	// (GuestOOMKills), until Violations takes them.
	mu      sync.Mutex
	ramHits []dryexec.Violation
	// stopWatch ends the watch on the VM's silence (heardFile.watch), nil
	// while none runs; silence is why the watch killed QEMU, or nil.
	stopWatch func()
	silence   error
}

// Conn is the VM's ctrl stream, watched for silence: the session guest
// sends its heartbeat (wire.VerbVMAlive) whenever it is not parked, and a
// VM silent for the rung's SilenceLimit (QEMU stopped, its kernel wedged)
// is killed, where an exec without a timeout would otherwise be waited for
// forever; the call in flight, and every later one, is then
// dryexec.ErrSessionLost, naming the silence (GuestEnded).
func (s *sessionSandbox) Conn() io.ReadWriteCloser { return watchedConn{s} }

// watchedConn arms the sandbox's watch on every write: the host asking
// something (a call, unparking) is when the guest must be alive; save
// disarms it while QEMU is stopped to save the VM.
type watchedConn struct{ s *sessionSandbox }

func (c watchedConn) Read(p []byte) (int, error) { return c.s.t.ctrl.Read(p) }
func (c watchedConn) Close() error               { return c.s.t.ctrl.Close() }

func (c watchedConn) Write(p []byte) (int, error) {
	c.s.arm()
	return c.s.t.ctrl.Write(p)
}

// arm starts the watch on the VM's silence unless it runs.
func (s *sessionSandbox) arm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopWatch != nil {
		return
	}
	s.stopWatch = s.t.ctrl.watch(s.t.r.silenceLimit(), func(cause error) {
		s.mu.Lock()
		s.silence = cause
		s.mu.Unlock()
		s.t.Kill()
	})
}

// disarm ends the watch on the VM's silence, if it runs.
func (s *sessionSandbox) disarm() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopWatch != nil {
		s.stopWatch()
		s.stopWatch = nil
	}
}

func (s *sessionSandbox) Workspace() string { return s.ws }

// GuestPID is QEMU's: the session guest is a process of the VM's kernel,
// and QEMU (the view guest, which became it) is the host process that
// holds it, whose death ends it.
func (s *sessionSandbox) GuestPID() int { return s.t.Cmd.Process.Pid }

// BootTime is how long the VM took from QEMU's start to the session
// guest's first bytes.
func (s *sessionSandbox) BootTime() time.Duration { return s.t.boot }

func (s *sessionSandbox) Configure(start *wire.SessionStart) {
	host, _ := os.Hostname()
	start.Rung, start.Workspace, start.Hostname = Name, s.ws, host
	// The VM's clock started from the RTC's whole second; the view's files
	// get the host's time from QEMU's 9p server, the workspace's the VM's.
	start.WallNS = time.Now().UnixNano()
	// Each exec in a user namespace of its own (uid 0, mapped whole), as a
	// trial's command in the VM, and the pids limit as its RLIMIT_NPROC:
	// the VM's processes are not the host's.
	start.CommandUserNS, start.CommandUID, start.CommandGID = true, 0, 0
	start.CommandNPROC = viewtrial.CommandNPROC(s.t.Spec.Limits)
	// netsim's trust variables, as a trial's command gets them; the VM's
	// NIC is configured by its init, and the trust files are in the view.
	start.Env = viewtrial.WithTrust(start.Env, s.t.net.trustEnv)
	if s.t.erofs != "" {
		// On an image the guest binds netsim's files over its own root.
		start.TrustBundle, start.TrustPath = s.t.net.trustBundle, s.t.net.trustPath
	}
}

// Ready does nothing: the masks were pinned when the view was built,
// before QEMU started.
func (s *sessionSandbox) Ready() error { return nil }

// GuestOOMKills takes the OOM kills of the VM's kernel during an exec, as
// the session guest counted them: the VM's RAM is the session's memory
// limit, as it is a trial's (limitHits).
func (s *sessionSandbox) GuestOOMKills(n int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ramHits = append(s.ramHits, s.t.ramHits(n)...)
}

// Violations are the limits hit and the masks read since the last call:
// the VM's RAM (GuestOOMKills), then the host cgroup's (QEMU's). The pids
// limit, RLIMIT_NPROC inside the VM, is not recorded for a session's execs
// yet.
func (s *sessionSandbox) Violations() []dryexec.Violation {
	s.mu.Lock()
	v := s.ramHits
	s.ramHits = nil
	s.mu.Unlock()
	v = append(v, s.t.group.Hits()...)
	return append(v, s.t.Watch.Check()...)
}

func (s *sessionSandbox) Warnings() []string {
	w := slices.Clone(s.t.group.Warnings)
	if mw := s.t.Watch.Warning(); mw != "" {
		w = append(w, mw)
	}
	w = append(w, s.t.net.net.SessionWarnings()...)
	if s.t.fc != nil {
		// Which VMM runs the session, and what that changes (no network
		// device: attempts fail unlogged), as a trial's delta says.
		w = append(w, strings.TrimPrefix(s.t.m.vmm.deltaNote(), "; "))
	}
	return w
}

// Network is what netsim logged so far, as on ns.
func (s *sessionSandbox) Network() []dryexec.NetworkEvent { return s.t.net.net.Log() }

// SyncNetwork returns once Network holds every event netsim has logged.
func (s *sessionSandbox) SyncNetwork(ctx context.Context) error { return s.t.net.net.Sync(ctx) }

// NetworkEnded says why the session's network ended early, or "".
func (s *sessionSandbox) NetworkEnded() string { return s.t.net.net.Ended() }

// GuestEnded says how QEMU ended: the VM resets (and QEMU exits) when the
// session guest ends or the VM's kernel panics (panic=-1), and a killed
// QEMU ends the guest with it. A panic is named (kernelPanicked).
func (s *sessionSandbox) GuestEnded() (string, bool) {
	t := s.t
	how, ok := t.Ended(linuxns.GuestExitWait)
	if !ok {
		return how, ok
	}
	how = t.vmmName() + " " + how
	s.mu.Lock()
	silence := s.silence
	s.mu.Unlock()
	if silence != nil {
		how += " by the host: " + silence.Error()
	}
	if p := s.t.kernelPanicked(); p != "" {
		how += " after the VM's kernel panicked (" + p + ")"
	}
	return how, ok
}

// KillExec does nothing: every process of the sandbox is the VM's, and
// ends with it.
func (s *sessionSandbox) KillExec(int) {}

// Close kills QEMU (if it still runs) and frees what the host holds: the
// ports, the masks' pins, the scratch handle. The view's mounts were in the
// view guest's mount namespace, which ended with QEMU.
func (s *sessionSandbox) Close() error {
	s.close.Do(func() {
		s.disarm()
		if s.q != nil {
			s.q.Close()
		}
		s.t.cleanup()
		s.t.net.close()
	})
	return nil
}
