package firecracker

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/dryexec/dryexec/internal/tail"
)

// DefaultStartTimeout bounds the wait for a new process's API socket.
const DefaultStartTimeout = 5 * time.Second

// outputTail is how much of the process's output is kept for errors.
const outputTail = 16 << 10

// Options are how Machines are launched.
type Options struct {
	// Launcher starts the process; nil: ExecLauncher.
	Launcher Launcher
	// StartTimeout bounds the wait for the API socket (within the call's
	// ctx); 0: DefaultStartTimeout.
	StartTimeout time.Duration
	// Log receives debug records; nil logs nothing.
	Log *slog.Logger
}

// Config is the VM Boot configures.
type Config struct {
	Machine MachineConfig
	Boot    BootSource
	// Drives: the root filesystem (read-only, the host's view) and
	// scratch drives, in this order in the guest.
	Drives []Drive
	// Vsock is the wire's device; nil: none.
	Vsock *Vsock
	// Net are the network interfaces, each on a host tap; none: the VM
	// has no network device.
	Net []NetworkInterface
}

// Snapshot is a parked VM on disk: the paths as Firecracker sees them.
type Snapshot struct {
	StatePath, MemPath string
	// VsockUDS is the vsock device's socket path ("" for none): the
	// snapshot records it and a restored VM binds it again, so the parked
	// process's socket file is removed before the restore.
	VsockUDS string
	// VsockOverride, when set, is where the restored VM binds its vsock
	// socket instead (snapshot/load's vsock_override): a parked VM's run
	// dir may be gone when it is restored, in another process.
	VsockOverride string
}

// Machine is one Firecracker process and its VM, driven through the API in
// the order Firecracker enforces. Its methods are not safe for concurrent
// use.
type Machine struct {
	spec   LaunchSpec
	proc   Process
	client *Client
	out    *tail.Buffer
	log    *slog.Logger
	state  string // InstanceNotStarted, InstanceRunning, InstancePaused
	vsock  string // the vsock socket as Firecracker sees it
	info   InstanceInfo

	closeOnce sync.Once
}

// Launch starts a Firecracker process (removing a stale API socket at the
// path first) and waits until its API answers: within opt.StartTimeout, a
// *wrapped* ErrNoSocket otherwise, or ErrExited if it ended first. A
// process that does not come up is killed.
func Launch(ctx context.Context, spec LaunchSpec, opt Options) (*Machine, error) {
	l := opt.Launcher
	if l == nil {
		l = ExecLauncher{}
	}
	sock := spec.HostAPISock()
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("removing a stale API socket: %w", err)
	}
	out := tail.New(outputTail)
	if spec.Output != nil {
		spec.Output = out.Tee(spec.Output)
	} else {
		spec.Output = out
	}
	p, err := l.Launch(ctx, spec)
	if err != nil {
		return nil, err
	}
	m := &Machine{spec: spec, proc: p, client: NewClient(sock), out: out, log: opt.Log, state: InstanceNotStarted}
	wctx, cancel := context.WithTimeout(ctx, cmp.Or(opt.StartTimeout, DefaultStartTimeout))
	defer cancel()
	start := time.Now()
	info, err := waitAPI(wctx, m.client, p, m.outputNote)
	if err != nil {
		m.Close()
		return nil, err
	}
	m.info = info
	m.debug("firecracker up", "pid", p.Pid(), "id", info.ID, "version", info.VMMVersion, "after", time.Since(start))
	return m, nil
}

func (m *Machine) debug(msg string, args ...any) {
	if m.log != nil {
		m.log.Debug(msg, args...)
	}
}

// outputNote is the tail of the process's output, for errors.
func (m *Machine) outputNote() string {
	b, _ := m.out.Bytes()
	s := strings.TrimSpace(string(bytes.ToValidUTF8(b, []byte("?"))))
	if s == "" {
		return ""
	}
	return " (firecracker's output: " + s + ")"
}

// Client is the machine's API client.
func (m *Machine) Client() *Client { return m.client }

// Process is the machine's VMM process.
func (m *Machine) Process() Process { return m.proc }

// Info is what GET / said when the API came up.
func (m *Machine) Info() InstanceInfo { return m.info }

// State is the VM's state as the machine last left it: InstanceNotStarted,
// InstanceRunning or InstancePaused.
func (m *Machine) State() string { return m.state }

// hostPath is a path Firecracker was given, as the host sees it.
func (m *Machine) hostPath(p string) string {
	if m.spec.Jailer == nil || p == "" {
		return p
	}
	return filepath.Join(m.spec.ChrootDir(), p)
}

// Transport is the wire's streams over the VM's vsock; nil without a vsock
// device.
func (m *Machine) Transport() Transport {
	if m.vsock == "" {
		return nil
	}
	return VsockTransport{UDSPath: m.hostPath(m.vsock)}
}

func (m *Machine) need(doing string, states ...string) error {
	for _, s := range states {
		if m.state == s {
			return nil
		}
	}
	return fmt.Errorf("%w: %s while the VM is %q", ErrState, doing, m.state)
}

// Boot configures the VM — machine, boot source, drives, network
// interfaces, vsock, all of them before the start as Firecracker requires
// — and starts it. Firecracker's refusals come back as *APIError.
func (m *Machine) Boot(ctx context.Context, cfg Config) error {
	if err := m.need("booting", InstanceNotStarted); err != nil {
		return err
	}
	c := m.client
	type step struct {
		what string
		do   func() error
	}
	steps := []step{
		{"machine config", func() error { return c.PutMachineConfig(ctx, cfg.Machine) }},
		{"boot source", func() error { return c.PutBootSource(ctx, cfg.Boot) }},
	}
	for _, d := range cfg.Drives {
		steps = append(steps, step{"drive " + d.DriveID, func() error { return c.PutDrive(ctx, d) }})
	}
	for _, n := range cfg.Net {
		steps = append(steps, step{"network interface " + n.IfaceID, func() error { return c.PutNetworkInterface(ctx, n) }})
	}
	if cfg.Vsock != nil {
		v := *cfg.Vsock
		steps = append(steps, step{"vsock", func() error { return c.PutVsock(ctx, v) }})
	}
	for _, s := range steps {
		if err := s.do(); err != nil {
			return fmt.Errorf("configuring the %s: %w", s.what, err)
		}
	}
	start := time.Now()
	if err := c.InstanceStart(ctx); err != nil {
		return fmt.Errorf("starting the VM: %w%s", err, m.outputNote())
	}
	m.state = InstanceRunning
	if cfg.Vsock != nil {
		m.vsock = cfg.Vsock.UDSPath
	}
	m.debug("firecracker VM started", "took", time.Since(start))
	return nil
}

// Pause stops the VM's vCPUs.
func (m *Machine) Pause(ctx context.Context) error {
	if err := m.need("pausing", InstanceRunning); err != nil {
		return err
	}
	if err := m.client.Pause(ctx); err != nil {
		return err
	}
	m.state = InstancePaused
	return nil
}

// Resume restarts a paused VM.
func (m *Machine) Resume(ctx context.Context) error {
	if err := m.need("resuming", InstancePaused); err != nil {
		return err
	}
	if err := m.client.Resume(ctx); err != nil {
		return err
	}
	m.state = InstanceRunning
	return nil
}

// Park saves the VM to snap (pausing it first; a full snapshot) and ends
// the process, so that a parked VM holds no RAM. The snapshot's files are
// the caller's. On an error before the snapshot is written the VM is left
// paused and running its process: the caller decides (Resume or Close).
func (m *Machine) Park(ctx context.Context, snap Snapshot) (Snapshot, error) {
	if err := m.need("parking", InstanceRunning, InstancePaused); err != nil {
		return Snapshot{}, err
	}
	if m.state == InstanceRunning {
		if err := m.Pause(ctx); err != nil {
			return Snapshot{}, fmt.Errorf("pausing to park: %w", err)
		}
	}
	start := time.Now()
	err := m.client.CreateSnapshot(ctx, SnapshotCreate{SnapshotType: SnapshotFull, SnapshotPath: snap.StatePath, MemFilePath: snap.MemPath})
	if err != nil {
		return Snapshot{}, fmt.Errorf("snapshotting to park: %w", err)
	}
	snap.VsockUDS = m.vsock
	m.debug("firecracker VM parked", "took", time.Since(start))
	return snap, m.Close()
}

// Restore starts a fresh Firecracker process and loads snap into it,
// resumed: the parked VM runs again where it stopped. Nothing may be
// configured before a load (Firecracker refuses it), so Restore is the
// whole of the new process's configuration.
func Restore(ctx context.Context, spec LaunchSpec, snap Snapshot, opt Options) (*Machine, error) {
	m, err := Launch(ctx, spec, opt)
	if err != nil {
		return nil, err
	}
	bind := cmp.Or(snap.VsockOverride, snap.VsockUDS)
	if bind != "" {
		if err := os.Remove(m.hostPath(bind)); err != nil && !errors.Is(err, os.ErrNotExist) {
			m.Close()
			return nil, fmt.Errorf("removing the parked VM's vsock socket: %w", err)
		}
	}
	load := SnapshotLoad{SnapshotPath: snap.StatePath,
		MemBackend: &MemoryBackend{BackendType: "File", BackendPath: snap.MemPath}, ResumeVM: true}
	if snap.VsockOverride != "" {
		load.VsockOverride = &VsockOverride{UDSPath: snap.VsockOverride}
	}
	start := time.Now()
	if err := m.client.LoadSnapshot(ctx, load); err != nil {
		m.Close()
		return nil, fmt.Errorf("restoring the parked VM: %w%s", err, m.outputNote())
	}
	m.state, m.vsock = InstanceRunning, bind
	m.debug("firecracker VM restored", "took", time.Since(start))
	return m, nil
}

// Shutdown asks the guest to stop (SendCtrlAltDel) and waits, within ctx,
// for the process to end; a VM that does not is killed. Either way the
// machine is closed.
func (m *Machine) Shutdown(ctx context.Context) error {
	defer m.Close()
	if err := m.need("shutting down", InstanceRunning); err != nil {
		return err
	}
	if err := m.client.SendCtrlAltDel(ctx); err != nil {
		return err
	}
	select {
	case <-m.proc.Done():
		return nil
	case <-ctx.Done():
		return fmt.Errorf("the VM did not shut down: %w (killed)", context.Cause(ctx))
	}
}

// Close kills the process if it still runs, waits for it, and removes its
// API and vsock sockets. It may be called more than once.
func (m *Machine) Close() error {
	var err error
	m.closeOnce.Do(func() {
		err = m.proc.Kill()
		<-m.proc.Done()
		m.client.Close()
		for _, p := range []string{m.spec.HostAPISock(), m.hostPath(m.vsock)} {
			if p != "" {
				os.Remove(p)
			}
		}
		m.state = ""
	})
	return err
}
