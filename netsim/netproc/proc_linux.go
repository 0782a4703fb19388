package netproc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/dryexec/dryexec/internal/guestexe"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/netsim/ca"
	"github.com/dryexec/dryexec/netsim/mockfile"
	"github.com/dryexec/dryexec/netsim/netconf"
)

// Executable is the binary Start runs: $DRYEXEC_NETSIM, else dryexec-netsim
// beside the running executable, else the running executable itself (which
// must then call netrole.MaybeMain first thing). Why a binary of its own:
// the role starts on every trial, and the CLI's binary pays for the
// decision engine, the daemon and the MCP server before main runs.
func Executable() string { return guestexe.Beside(ExeEnv, ExeName) }

// Installed is Executable when that is not the running binary: ok is false
// when Start would run the running binary itself as the role. A program
// that does not link the role (package netrole: the local engine) asks
// before it takes a trial, and leaves the trial to one that does when no
// role binary is there.
func Installed() (exe string, ok bool) {
	exe = Executable()
	return exe, exe != guestexe.Self()
}

// OpenAPIExecutable is the binary Start runs for a mock file naming OpenAPI
// documents: $DRYEXEC_NETSIM_OPENAPI, else dryexec-netsim-openapi beside the
// running executable, else Executable() (which then refuses the file, naming
// the binary that serves it, unless it called MaybeMainOpenAPI).
func OpenAPIExecutable() string {
	if p := guestexe.Beside(OpenAPIExeEnv, OpenAPIExeName); p != guestexe.Self() {
		return p
	}
	return Executable()
}

// Proc is one running role process: one sandbox's network.
type Proc struct {
	cmd    *exec.Cmd
	ctrl   *net.UnixConn
	trust  netconf.Trust
	conf   Confinement
	stderr *tailBuf

	// mu guards records, dropped and err.
	mu      sync.Mutex
	records []netconf.Record
	dropped int
	err     error

	quiet     chan struct{}
	quietOnce sync.Once
	done      chan struct{} // closed once the process is reaped
	ready     chan struct{} // closed once readyErr is set
	readyErr  error
	copied    chan struct{} // closed once its stderr is read and closed
	stopOnce  sync.Once

	// wmu serialises what the parent writes after the Setup (a sync, the
	// shutdown in Stop); seq numbers the syncs sent, stopped says Stop ran.
	wmu     sync.Mutex
	seq     uint64
	stopped bool
	// synced is the last sync answered, and syncNote is closed (and
	// replaced) at each answer; both under mu.
	synced   uint64
	syncNote chan struct{}
}

// Start starts the role for a sandbox whose TUN device will arrive over link
// (the host's end of the hand-over socket; Start takes ownership). cfg says
// what the network may do: MockFile, Allow, Seed and the bounds are used,
// CADir must hold the CA (it is created there if missing), the function
// fields must be nil (they cannot cross a process boundary). It returns once
// the role runs, without waiting for it to be ready, so that its start-up
// overlaps the sandbox's: see Ready. Stop ends the network.
func Start(cfg netconf.Config, link *os.File, exe string) (*Proc, error) {
	return start(cfg, link, exe, LinkTUN)
}

// StartEthernet is Start for a sandbox whose network is a VM's NIC: frames
// is a datagram socket (AF_UNIX, SOCK_DGRAM) carrying one Ethernet frame per
// datagram, whose peer the VMM holds (QEMU's -netdev dgram with local.type=fd).
// The role serves it as it is: no device is handed over.
func StartEthernet(cfg netconf.Config, frames *os.File, exe string) (*Proc, error) {
	return start(cfg, frames, exe, LinkEthernet)
}

func start(cfg netconf.Config, link *os.File, exe, kind string) (*Proc, error) {
	defer link.Close()
	if cfg.LookupHost != nil || cfg.UpstreamRoots != nil || cfg.LookupEnv != nil || cfg.OnRecord != nil || cfg.ReadSecretFile != nil || cfg.OpenAPI != nil {
		return nil, errors.New("netproc: Config's functions and pools cannot be passed to another process")
	}
	setup, c, err := prepare(cfg)
	if err != nil {
		return nil, err
	}
	if exe == "" {
		exe = Executable()
		if openAPI, err := mockfile.MocksOpenAPI(&cfg); err != nil {
			return nil, err
		} else if openAPI {
			exe = OpenAPIExecutable()
		}
	}
	setup.Link = kind
	rs, err := ruleset(exe, cfg.MockFile)
	if err != nil {
		return nil, err
	}
	if rs >= 0 {
		defer unix.Close(rs)
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("netproc: socketpair: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "netsim-ctrl"), os.NewFile(uintptr(fds[1]), "netsim-ctrl-role")
	defer theirs.Close()
	fc, err := net.FileConn(ours)
	ours.Close()
	if err != nil {
		return nil, err
	}
	ctrl := fc.(*net.UnixConn)
	devnull, err := os.Open(os.DevNull)
	if err != nil {
		ctrl.Close()
		return nil, err
	}
	defer devnull.Close()
	er, ew, err := os.Pipe()
	if err != nil {
		ctrl.Close()
		return nil, err
	}
	p := &Proc{ctrl: ctrl, trust: netconf.TrustOf(c), stderr: &tailBuf{max: 4096},
		quiet: make(chan struct{}), done: make(chan struct{}), ready: make(chan struct{}), syncNote: make(chan struct{})}
	// Every file the child gets is open before the fork: the thread that
	// forks runs in the role's Landlock domain and may open nothing.
	p.cmd = &exec.Cmd{Path: exe, Args: []string{exe, Role}, Env: []string{},
		Stdin: devnull, Stdout: ew, Stderr: ew, ExtraFiles: []*os.File{theirs, link}}
	err = startIn(p.cmd, rs)
	ew.Close()
	if err != nil {
		er.Close()
		ctrl.Close()
		return nil, fmt.Errorf("netproc: starting %s: %w", exe, err)
	}
	p.copied = make(chan struct{})
	go func() {
		defer close(p.copied)
		io.Copy(p.stderr, er)
		er.Close()
	}()
	if err := json.NewEncoder(ctrl).Encode(setup); err != nil {
		p.kill()
		return nil, fmt.Errorf("netproc: sending the setup: %w", err)
	}
	dec := json.NewDecoder(bufio.NewReaderSize(ctrl, 64<<10))
	go p.read(dec)
	return p, nil
}

// Ready waits until the role has made its Sim and confined itself, and
// returns why it could not: a netconf.ErrBadConfig for a bad configuration
// (a mock file that does not compile, a credential that is not there), an
// ErrCrashed if it died. On ctx's end it kills the role.
func (p *Proc) Ready(ctx context.Context) error {
	select {
	case <-p.ready:
		return p.readyErr
	case <-ctx.Done():
		p.kill()
		return ctx.Err()
	}
}

// CATrustOf is what a role started with cfg would give the sandbox to
// trust (Proc.Trust), without starting one, and without the bundle
// (netconf.CATrustOf): for a network whose role starts only if the sandbox
// sends anything, in a sandbox whose guest makes the bundle.
func CATrustOf(cfg netconf.Config) (netconf.Trust, error) {
	if cfg.CADir == "" {
		return netconf.Trust{}, fmt.Errorf("%w: CADir is required", netconf.ErrBadConfig)
	}
	c, err := ca.LoadOrCreate(cfg.CADir)
	if err != nil {
		return netconf.Trust{}, err
	}
	return netconf.CATrustOf(c), nil
}

// prepare reads what the role needs and may not read itself.
func prepare(cfg netconf.Config) (*Setup, *ca.CA, error) {
	if cfg.CADir == "" {
		return nil, nil, fmt.Errorf("%w: CADir is required", netconf.ErrBadConfig)
	}
	c, err := ca.LoadOrCreate(cfg.CADir)
	if err != nil {
		return nil, nil, err
	}
	caData, err := os.ReadFile(filepath.Join(cfg.CADir, ca.FileName))
	if err != nil {
		return nil, nil, err
	}
	setup := &Setup{MockFile: cfg.MockFile, Allow: cfg.Allow, Seed: cfg.Seed, MaxBodyBytes: cfg.MaxBodyBytes,
		MaxEvents: cfg.MaxEvents, SniffTimeout: cfg.SniffTimeout, CA: caData, Env: map[string]string{}, Files: map[string][]byte{}}
	if cfg.MockFile != "" {
		abs, err := filepath.Abs(cfg.MockFile)
		if err != nil {
			return nil, nil, err
		}
		setup.MockFile = abs
	}
	// The rules (the mock file's too) name the credentials to inject: read
	// them here, with the caller's environment and permissions. A missing
	// one is left out; the role's netsim.New then reports it as it would.
	rules, err := mockfile.Rules(&cfg)
	if err != nil {
		return nil, nil, err
	}
	for _, r := range rules {
		for _, sec := range r.Inject {
			if sec.Env != "" {
				if v, ok := os.LookupEnv(sec.Env); ok {
					setup.Env[sec.Env] = v
				}
			} else if b, err := os.ReadFile(sec.File); err == nil {
				setup.Files[sec.File] = b
			}
		}
	}
	// Only allowed HTTPS is verified: a configuration without allow rules
	// spares the role parsing the host's ≈150 roots.
	if len(rules) > 0 {
		setup.Roots = systemRoots()
	}
	return setup, c, nil
}

// systemRoots reads the host's trust store where crypto/x509 looks for it
// on Linux ($SSL_CERT_FILE first).
func systemRoots() []byte {
	files := []string{
		"/etc/ssl/certs/ca-certificates.crt",
		"/etc/pki/tls/certs/ca-bundle.crt",
		"/etc/ssl/ca-bundle.pem",
		"/etc/pki/tls/cacert.pem",
		"/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",
		"/etc/ssl/cert.pem",
	}
	if f := os.Getenv("SSL_CERT_FILE"); f != "" {
		files = []string{f}
	}
	for _, f := range files {
		if b, err := os.ReadFile(f); err == nil && len(b) > 0 {
			return b
		}
	}
	return nil
}

// startIn starts cmd from a thread of its own that enters the Landlock
// domain rs first (-1: none), so that the child runs in it from its first
// instruction: Landlock confines a thread, and a Go program cannot confine
// all its threads itself (the runtime starts them before main). The thread
// ends with the goroutine (it is never unlocked), and the domain with it.
func startIn(cmd *exec.Cmd, rs int) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if rs >= 0 {
			// Landlock needs no_new_privs without CAP_SYS_ADMIN; the child
			// inherits it either way.
			if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
				errc <- fmt.Errorf("no_new_privs: %w", err)
				return
			}
			if _, _, e := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(rs), 0, 0); e != 0 {
				errc <- fmt.Errorf("landlock_restrict_self: %w", e)
				return
			}
		}
		errc <- cmd.Start()
	}()
	return <-errc
}

// read takes the role's messages until its stream ends, then reaps it.
func (p *Proc) read(dec *json.Decoder) {
	var end error
	finished, isReady := false, false
	for {
		var m Msg
		if err := dec.Decode(&m); err != nil {
			break
		}
		switch m.Kind {
		case MsgReady:
			if m.Confinement != nil {
				p.conf = *m.Confinement
			}
			isReady = true
			close(p.ready)
		case MsgRecord:
			p.mu.Lock()
			if m.Kept && m.Record != nil {
				p.records = append(p.records, *m.Record)
			} else {
				p.dropped++
			}
			p.mu.Unlock()
		case MsgQuiet:
			p.markQuiet()
		case MsgSynced:
			p.mu.Lock()
			if m.Seq > p.synced {
				p.synced = m.Seq
				close(p.syncNote)
				p.syncNote = make(chan struct{})
			}
			p.mu.Unlock()
		case MsgDone:
			finished = true
			if m.Err != "" {
				end = errors.New(m.Err)
				if m.BadConfig {
					end = fmt.Errorf("%w: %s", netconf.ErrBadConfig, strings.TrimPrefix(m.Err, netconf.ErrBadConfig.Error()+": "))
				}
			}
		}
		if finished {
			break
		}
	}
	p.ctrl.Close()
	werr := p.cmd.Wait()
	<-p.copied // nothing of the role stays open once Done is closed
	if !finished {
		why := "exit"
		if werr != nil {
			why = werr.Error()
		}
		if s := strings.TrimSpace(p.stderr.String()); s != "" {
			why += ": " + firstLine(s)
		}
		end = fmt.Errorf("%w (%s)", ErrCrashed, why)
	}
	p.mu.Lock()
	p.err = end
	p.mu.Unlock()
	if !isReady {
		p.readyErr = end
		if end == nil {
			p.readyErr = fmt.Errorf("%w (it ended before it was ready)", ErrCrashed)
		}
		close(p.ready)
	}
	// Done before Quiet: a caller woken by Quiet that finds Done open knows
	// the role did not die before it was quiet.
	close(p.done)
	p.markQuiet()
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

func (p *Proc) markQuiet() { p.quietOnce.Do(func() { close(p.quiet) }) }

func (p *Proc) kill() {
	p.cmd.Process.Kill()
	p.ctrl.Close()
}

// Trust is what the sandbox needs to trust the role's CA.
func (p *Proc) Trust() netconf.Trust { return p.trust }

// Confinement is what the role applied to itself.
func (p *Proc) Confinement() Confinement { return p.conf }

// Pid is the role process's id.
func (p *Proc) Pid() int { return p.cmd.Process.Pid }

// Log is every network event so far, in the order the role logged them.
func (p *Proc) Log() []dryexec.NetworkEvent {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]dryexec.NetworkEvent, len(p.records))
	for i, r := range p.records {
		out[i] = r.NetworkEvent
	}
	return out
}

// Records are the events with their bounded, redacted bodies.
func (p *Proc) Records() []netconf.Record {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]netconf.Record(nil), p.records...)
}

// Dropped counts the events beyond the log's bound.
func (p *Proc) Dropped() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

// Quiet is closed once the role takes no more packets and every event it
// logged is in Log, or once it has died.
func (p *Proc) Quiet() <-chan struct{} { return p.quiet }

// Done is closed once the role process is gone and every descriptor Start
// opened for it is closed.
func (p *Proc) Done() <-chan struct{} { return p.done }

// Err is why the network ended early, once Done is closed: nil when it
// ended as asked, an ErrCrashed when the role died, else what ended serving.
func (p *Proc) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Stop asks the role to stop taking packets, log what is still queued and
// exit. It does not wait: see Quiet and Done.
func (p *Proc) Stop() {
	p.stopOnce.Do(func() {
		p.wmu.Lock()
		defer p.wmu.Unlock()
		p.stopped = true
		p.ctrl.CloseWrite()
	})
}

// Sync returns once Log holds every event the role had logged when it read
// this call's request: netsim logs an answer before its last bytes leave
// and a refusal before it is sent, so after a command has seen those, Sync
// puts its events in Log. The events cross two queues (the role's sender,
// this process's reader), and a session reading its log the moment an exec
// ended missed some: they went to the next exec's list. After Stop it waits
// for Quiet instead, which says the same of every event; a role that died
// ends the wait too (its events are all it sent).
func (p *Proc) Sync(ctx context.Context) error {
	p.wmu.Lock()
	if p.stopped {
		p.wmu.Unlock()
		return p.waitQuiet(ctx)
	}
	p.seq++
	n := p.seq
	err := json.NewEncoder(p.ctrl).Encode(Control{Kind: CtrlSync, Seq: n})
	p.wmu.Unlock()
	if err != nil {
		// The role is gone or going: its stream ends, and Quiet with it.
		return p.waitQuiet(ctx)
	}
	for {
		p.mu.Lock()
		got, note := p.synced, p.syncNote
		p.mu.Unlock()
		if got >= n {
			return nil
		}
		select {
		case <-note:
		case <-p.quiet:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (p *Proc) waitQuiet(ctx context.Context) error {
	select {
	case <-p.quiet:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// tailBuf keeps the first max bytes of the role's stderr (a panic's first
// line is what says why it died).
type tailBuf struct {
	mu  sync.Mutex
	b   []byte
	max int
}

func (t *tailBuf) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if room := t.max - len(t.b); room > 0 {
		t.b = append(t.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (t *tailBuf) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.b)
}
