package linuxns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/netsim/ca"
	"github.com/dryexec/dryexec/netsim/netconf"
	"github.com/dryexec/dryexec/netsim/netproc"
	"github.com/dryexec/dryexec/netsim/tun"
	"github.com/dryexec/dryexec/wire"
)

// trialNet is one trial's network: a netsim serving the TUN device the guest
// creates in the sandbox's network namespace. netsim runs as a confined
// process of its own (package netsim/netproc): the host end of the
// hand-over socket goes to it, so the TUN device never enters this process. Without a usable /dev/net/tun
// (rootless on a host whose node is 0600), a trial that asked for nothing but
// "none" runs with loopback only and a warning; one that asked for mocks or
// allow rules fails, because silently cutting it off would give a false delta.
type trialNet struct {
	sim     *netproc.Proc
	trust   netconf.Trust
	guest   *os.File // the guest's end of the hand-over socket, passed as an extra fd
	served  bool     // serve was called
	warning string
	stopped bool // stop was called
	// starting, when not nil, is closed once the role's start (begun by
	// startTrialNet) has returned: sim, trust and startErr are set then.
	// join waits for it; nothing reads them before.
	starting chan struct{}
	startErr error
	// lazy: netsim starts only once the guest hands the TUN device over,
	// which it does when a packet waits on it (wire.TrialStart.NetLazy).
	// Until then cfg and host (our end of the hand-over socket) wait, and
	// watched is closed once the watcher (lazyWatch) is done. mu guards
	// sim, host and stopped, which the watcher sets.
	lazy    bool
	cfg     *netconf.Config
	host    *os.File
	watched chan struct{}
	mu      sync.Mutex
}

// newTrialNet starts the trial's netsim without waiting for it: ready does,
// once the guest's start-up has overlapped the role's.
func newTrialNet(spec dryexec.TrialSpec) (*trialNet, error) { return newNet(spec, false) }

// startTrialNet is newTrialNet with the role's start itself (reading the
// CA, the Landlock ruleset, the fork and exec) in the background: the
// caller starts the guest meanwhile, with only the guest's end of the
// hand-over socket, and calls started before it tells the guest anything
// of the network. A cold trial's path is a chain of process starts; this
// takes the role's off it.
//
// A trial whose network is "none" starts no role at all until the sandbox
// sends a packet (lazyNet): most commands send none, and the role's start
// was a quarter of a cold trial's CPU.
func startTrialNet(spec dryexec.TrialSpec) (*trialNet, error) {
	cfg, warning, err := netConfig(spec, true)
	if cfg == nil {
		return &trialNet{warning: warning}, err
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	if cfg.Mode() == "none" {
		return lazyNet(cfg, fds)
	}
	host := os.NewFile(uintptr(fds[0]), "net-host")
	n := &trialNet{guest: os.NewFile(uintptr(fds[1]), "net-guest"), starting: make(chan struct{})}
	go func() {
		defer close(n.starting)
		if n.sim, n.startErr = netproc.Start(*cfg, host, ""); n.startErr == nil {
			n.trust = n.sim.Trust()
		}
	}()
	return n, nil
}

// lazyNet is a trial network whose role starts when the guest hands the
// TUN device over (lazyWatch), or not at all. The trust bundle and
// variables are netsim's all the same, so the sandbox is the same either
// way. The CA (read, or made the first time) is loaded in the background,
// as the role's start is for another network: the guest's start does not
// wait for it, only trial.start does (join); a failure is the trial's, at
// started. The guest makes the bundle (startNS).
func lazyNet(cfg *netconf.Config, fds [2]int) (*trialNet, error) {
	// Non-blocking, so that the runtime's poller waits on our end for the
	// watcher and its Close wakes the watcher.
	unix.SetNonblock(fds[0], true)
	n := &trialNet{lazy: true, cfg: cfg, host: os.NewFile(uintptr(fds[0]), "net-host"), guest: os.NewFile(uintptr(fds[1]), "net-guest"),
		watched: make(chan struct{}), starting: make(chan struct{})}
	go func() {
		defer close(n.starting)
		n.trust, n.startErr = netproc.CATrustOf(*cfg)
	}()
	go n.lazyWatch()
	return n, nil
}

// lazyWatch starts netsim once the TUN device waits on our end of the
// hand-over socket; it returns without when the end is closed first (the
// trial ended having sent nothing, or the guest died).
func (n *trialNet) lazyWatch() {
	defer close(n.watched)
	rc, err := n.host.SyscallConn()
	if err != nil {
		return
	}
	var sent bool
	// Read only waits: the device stays on the socket for the role.
	err = rc.Read(func(fd uintptr) bool {
		sent = handedOver(int(fd))
		return sent || !pending(int(fd))
	})
	if err == nil && sent {
		n.mu.Lock()
		n.startLazy()
		n.mu.Unlock()
	}
}

// pending says whether fd has nothing to read yet and its peer is still
// there: the watcher keeps waiting.
func pending(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN | unix.POLLRDHUP}}
	n, err := unix.Poll(fds, 0)
	return err == nil && n == 0
}

// handedOver says whether the guest's message with the device waits on fd
// (a byte of data carries it, tun.SendFD).
func handedOver(fd int) bool {
	n, err := unix.IoctlGetInt(fd, unix.SIOCINQ)
	return err == nil && n > 0
}

// startLazy starts the role of a lazy network on the device waiting on
// host, unless the trial's network is stopped or started already; mu is
// held.
func (n *trialNet) startLazy() {
	if n.stopped || n.sim != nil || n.host == nil {
		return
	}
	host := n.host
	n.host = nil
	// A start that fails leaves the sandbox's network ended early: the
	// delta says so (crashed).
	n.sim, n.startErr = netproc.Start(*n.cfg, host, "")
}

// join waits for a start begun by startTrialNet; a failed start leaves no
// netsim (sim nil) and closes the guest's end, as newTrialNet would have.
func (n *trialNet) join() {
	if n == nil || n.starting == nil {
		return
	}
	<-n.starting
	n.starting = nil
	if n.startErr != nil && !n.served {
		n.served = true // nothing more to hand over
		n.guest.Close()
	}
}

// started waits for a start begun by startTrialNet and returns its error.
func (n *trialNet) started() error {
	n.join()
	if n == nil || n.startErr == nil {
		return nil
	}
	return badConfig(n.startErr)
}

// newNet is newTrialNet; with ethernet, the guest's end is not a hand-over
// socket but a datagram socket of Ethernet frames for a VM's NIC (the VMM
// holds it), and no TUN device is needed.
func newNet(spec dryexec.TrialSpec, ethernet bool) (*trialNet, error) {
	cfg, warning, err := netConfig(spec, !ethernet)
	if cfg == nil {
		return &trialNet{warning: warning}, err
	}
	typ, start := unix.SOCK_STREAM, netproc.Start
	if ethernet {
		typ, start = unix.SOCK_DGRAM, netproc.StartEthernet
		// A VM (under TCG) is slow to speak first: see VMSniffTimeout.
		cfg.SniffTimeout = VMSniffTimeout
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, typ|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	guest := os.NewFile(uintptr(fds[1]), "net-guest")
	sim, err := start(*cfg, os.NewFile(uintptr(fds[0]), "net-host"), "")
	if err != nil {
		guest.Close()
		return nil, badConfig(err)
	}
	return &trialNet{sim: sim, trust: sim.Trust(), guest: guest}, nil
}

// ready waits until netsim is made and confined: a bad configuration is a
// dryexec.ErrBadAction here.
func (n *trialNet) ready(ctx context.Context) error {
	n.join()
	if n == nil || n.lazy || n.sim == nil {
		return nil
	}
	return badConfig(n.sim.Ready(ctx))
}

func badConfig(err error) error {
	if errors.Is(err, netconf.ErrBadConfig) {
		return fmt.Errorf("%w: %w", dryexec.ErrBadAction, err)
	}
	return err
}

// netConfig is the netsim configuration spec.Net asks for. Without a usable
// /dev/net/tun (when needTUN) it returns none: with a warning when loopback
// only is an honest answer (nothing but "none" was asked), else with an
// error.
func netConfig(spec dryexec.TrialSpec, needTUN bool) (*netconf.Config, string, error) {
	specs := spec.Net
	if len(specs) == 0 {
		specs = []string{"none"}
	}
	cfg := netconf.Config{CADir: spec.NetCADir, Seed: seedOf(spec.TrialID)}
	for _, s := range specs {
		if err := cfg.AddSpec(s); err != nil {
			return nil, "", fmt.Errorf("%w: --net %s: %w", dryexec.ErrBadAction, s, err)
		}
	}
	if err := tun.CheckTUN(); needTUN && err != nil {
		if slices.ContainsFunc(specs, func(s string) bool { return s != "none" }) {
			return nil, "", &dryexec.IsolationUnavailableError{Rung: Name, Missing: "network interception (mocks, allow rules) needs /dev/net/tun: " + err.Error()}
		}
		return nil, "network not intercepted: " + err.Error() + "; the sandbox has loopback only, so nothing leaves, but attempts are not logged", nil
	}
	dir, err := caDirOf(cfg.CADir)
	if err != nil {
		return nil, "", err
	}
	cfg.CADir = dir
	return &cfg, "", nil
}

// EnsureCA returns netsim's CA directory (dir, or $DRYEXEC_HOME/netsim-ca
// when empty) after making the CA if it is not there yet.
func EnsureCA(dir string) (string, error) {
	dir, err := caDirOf(dir)
	if err != nil {
		return "", err
	}
	if _, err := os.Stat(filepath.Join(dir, ca.FileName)); err == nil {
		return dir, nil
	}
	if _, err := ca.LoadOrCreate(dir); err != nil {
		return "", err
	}
	return dir, nil
}

// caDirOf is dir, or the install's default CA dir when dir is empty.
func caDirOf(dir string) (string, error) {
	if dir != "" {
		return dir, nil
	}
	home, err := dryexec.DefaultHome(os.Getenv)
	if err != nil {
		return "", err
	}
	return filepath.Join(home, "netsim-ca"), nil
}

// seedOf makes mocks repeatable per trial: the same trial id, the same bytes.
func seedOf(id string) uint64 { return netconf.SeedOf(id) }

// serve lets netsim serve the device the guest will send. Call it once the
// guest runs (it has its end of the socket): our copy is closed, so that
// the role sees the socket end if the guest dies before sending.
func (n *trialNet) serve(ctx context.Context) {
	if n == nil || (n.sim == nil && !n.lazy) || n.served {
		return
	}
	n.served = true
	n.guest.Close()
}

// start fills what the guest needs in start to create the TUN device and
// bind netsim's resolv.conf and trust bundle.
func (n *trialNet) start(start *wire.TrialStart, netFD int) {
	n.join()
	if n == nil || (n.sim == nil && !n.lazy) {
		return
	}
	start.Net, start.NetFD, start.NetLazy = true, netFD, n.lazy
	start.TrustBundle, start.TrustPath = n.trust.Bundle, n.trust.BundlePath
}

// startNS is start for an ns trial's guest, which reads the host's roots
// itself (wire.TrialStart.TrustSystem): only netsim's CA goes with the
// request.
func (n *trialNet) startNS(start *wire.TrialStart, netFD int) {
	n.start(start, netFD)
	if start.Net {
		start.TrustSystem, start.TrustCA, start.TrustBundle = start.TrustPath, n.trust.CAPEM, nil
	}
}

// trustEnv adds the trust variables to a command's environment (not to the
// recorded Action.Env: they are the sandbox's plumbing, not the caller's).
// They win over the caller's own: a CA bundle the sandbox was told about
// elsewhere would not hold netsim's CA.
func (n *trialNet) trustEnv(env []string) []string {
	n.join()
	if n == nil || (n.sim == nil && !n.lazy) {
		return env
	}
	env = slices.DeleteFunc(env, func(kv string) bool {
		k, _, _ := strings.Cut(kv, "=")
		_, ours := n.trust.Env[k]
		return ours
	})
	for k, v := range n.trust.Env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	return env
}

// stop starts stopping netsim once every sandbox process is gone: the
// packets still queued on the device are read and logged first (netsim's
// tunLink drains), and the rest of the trial (the guest's walk of the upper
// dirs) goes on meanwhile. finish waits for it.
func (n *trialNet) stop() {
	n.join()
	if n != nil && n.lazy {
		n.stopLazy()
		return
	}
	if n == nil || n.sim == nil || n.stopped {
		return
	}
	n.stopped = true
	n.sim.Stop()
	if !n.served {
		n.guest.Close()
	}
}

// stopLazy is stop for a lazy network: the guest has handed the device
// over by now if the sandbox sent anything (it does so before
// trial.exit), so the role starts now if the watcher has not started it,
// to log what waits on the device; else no role ever runs.
func (n *trialNet) stopLazy() {
	n.mu.Lock()
	if !n.stopped {
		if n.sim == nil && n.host != nil {
			var sent bool
			if rc, err := n.host.SyscallConn(); err == nil {
				rc.Control(func(fd uintptr) { sent = handedOver(int(fd)) })
			}
			if sent {
				n.startLazy()
			}
		}
		n.stopped = true
		if n.host != nil {
			n.host.Close() // wakes the watcher
			n.host = nil
		}
		if !n.served {
			n.served = true
			n.guest.Close()
		}
	}
	sim := n.sim
	n.mu.Unlock()
	if sim != nil {
		sim.Stop()
	}
}

// finish stops netsim (every sandbox process is gone by now; the TUN fd it
// holds is what kept the namespace alive), if stop has not, and puts its log
// in d. netsim's teardown may still run: close waits for it. A netsim
// process that died (killed, crashed) ended the sandbox's network early:
// the delta says so and is incomplete, since attempts after that point
// reached nothing and were not logged.
func (n *trialNet) finish(d *dryexec.StateDelta) {
	n.join()
	if n == nil {
		return
	}
	if n.warning != "" && d != nil {
		d.Warnings = append(d.Warnings, n.warning)
	}
	if n.sim == nil && !n.lazy {
		return
	}
	n.stop()
	if n.sim == nil {
		// A lazy network the sandbox sent nothing on (or whose role could
		// not start: crashed says so): what a role would have logged.
		if d != nil {
			if n.startErr != nil {
				d.Incomplete = true
				d.IncompleteReason = joinReasons(d.IncompleteReason, endedEarly(n.startErr))
			}
			d.Network = nil
			d.Normalize()
			d.ComputeTotals()
		}
		return
	}
	<-n.sim.Quiet()
	if d != nil {
		d.Network = n.sim.Log()
		if err := n.crashed(); err != nil {
			d.Incomplete = true
			d.IncompleteReason = joinReasons(d.IncompleteReason, endedEarly(err))
		}
		d.Normalize()
		d.ComputeTotals()
	}
}

// endedEarly is how a delta or a session says that netsim died under it.
func endedEarly(err error) string { return "the sandbox's network ended early: " + err.Error() }

// crashed is why the netsim process died before it was told to stop, or
// nil.
func (n *trialNet) crashed() error {
	select {
	case <-n.sim.Done():
	default:
		return nil // still running: it ended as asked, or is ending
	}
	if err := n.sim.Err(); errors.Is(err, netproc.ErrCrashed) {
		return err
	}
	return nil
}

// close stops netsim, if finish has not, and waits until it has released
// everything.
func (n *trialNet) close() {
	n.join()
	if n != nil && n.lazy {
		n.stop()
		<-n.watched
	}
	if n == nil || n.sim == nil {
		return
	}
	n.stop()
	<-n.sim.Done()
}
