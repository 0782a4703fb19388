package linuxns

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/netsim"
	"github.com/dryexec/dryexec/netsim/ca"
	"github.com/dryexec/dryexec/netsim/tun"
	"github.com/dryexec/dryexec/wire"
)

// trialNet is one trial's network: a netsim serving the TUN device the guest
// creates in the sandbox's network namespace. Without a usable /dev/net/tun
// (rootless on a host whose node is 0600), a trial that asked for nothing but
// "none" runs with loopback only and a warning; one that asked for mocks or
// allow rules fails, because silently cutting it off would give a false delta.
type trialNet struct {
	sim     *netsim.Sim
	trust   netsim.Trust
	host    *net.UnixConn // our end of the hand-over socket
	guest   *os.File      // the guest's end, passed as an extra fd
	cancel  context.CancelFunc
	served  chan error
	reaped  bool // served was received
	warning string
	stopped bool // stop was called
}

func newTrialNet(ctx context.Context, spec dryexec.TrialSpec) (*trialNet, error) {
	sim, warning, err := newSim(ctx, spec)
	if sim == nil {
		return &trialNet{warning: warning}, err
	}
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("socketpair: %w", err)
	}
	hostEnd := os.NewFile(uintptr(fds[0]), "net-host")
	c, err := net.FileConn(hostEnd)
	hostEnd.Close()
	if err != nil {
		unix.Close(fds[1])
		return nil, err
	}
	return &trialNet{sim: sim, trust: sim.Trust(), host: c.(*net.UnixConn),
		guest: os.NewFile(uintptr(fds[1]), "net-guest"), served: make(chan error, 1)}, nil
}

// newSim makes the netsim spec.Net asks for. Without a usable /dev/net/tun
// it returns no Sim: with a warning when loopback only is an honest answer
// (nothing but "none" was asked), else with an error.
func newSim(ctx context.Context, spec dryexec.TrialSpec) (*netsim.Sim, string, error) {
	specs := spec.Net
	if len(specs) == 0 {
		specs = []string{"none"}
	}
	cfg := netsim.Config{CADir: spec.NetCADir, Seed: seedOf(spec.TrialID)}
	for _, s := range specs {
		if err := cfg.AddSpec(s); err != nil {
			return nil, "", fmt.Errorf("%w: --net %s: %w", dryexec.ErrBadAction, s, err)
		}
	}
	if err := tun.CheckTUN(); err != nil {
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
	sim, err := netsim.New(ctx, cfg)
	if err != nil {
		if errors.Is(err, netsim.ErrBadConfig) {
			return nil, "", fmt.Errorf("%w: %w", dryexec.ErrBadAction, err)
		}
		return nil, "", err
	}
	return sim, "", nil
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
func seedOf(id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	return h.Sum64()
}

// serve starts serving the device the guest will send. Call it once the guest
// runs (it has its end of the socket).
func (n *trialNet) serve(ctx context.Context) {
	if n == nil || n.sim == nil {
		return
	}
	n.guest.Close()
	ctx, n.cancel = context.WithCancel(context.WithoutCancel(ctx))
	go func() {
		dev, err := tun.RecvFD(n.host)
		if err != nil {
			n.served <- fmt.Errorf("receiving the TUN device: %w", err)
			return
		}
		n.served <- n.sim.ServeTUN(ctx, dev)
	}()
}

// start fills what the guest needs in start to create the TUN device and
// bind netsim's resolv.conf and trust bundle.
func (n *trialNet) start(start *wire.TrialStart, netFD int) {
	if n == nil || n.sim == nil {
		return
	}
	start.Net, start.NetFD = true, netFD
	start.TrustBundle, start.TrustPath = n.trust.Bundle, n.trust.BundlePath
}

// trustEnv adds the trust variables to a command's environment (not to the
// recorded Action.Env: they are the sandbox's plumbing, not the caller's).
// They win over the caller's own: a CA bundle the sandbox was told about
// elsewhere would not hold netsim's CA.
func (n *trialNet) trustEnv(env []string) []string {
	if n == nil || n.sim == nil {
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
	if n == nil || n.sim == nil || n.stopped {
		return
	}
	n.stopped = true
	if n.cancel != nil {
		n.cancel()
	}
	n.host.Close()
	if n.cancel == nil {
		n.guest.Close()
	}
}

// finish stops netsim (every sandbox process is gone by now; the TUN fd it
// holds is what kept the namespace alive), if stop has not, and puts its log
// in d. netsim's teardown may still run: close waits for it.
func (n *trialNet) finish(d *dryexec.StateDelta) {
	if n == nil {
		return
	}
	if n.warning != "" && d != nil {
		d.Warnings = append(d.Warnings, n.warning)
	}
	if n.sim == nil {
		return
	}
	n.stop()
	if n.cancel != nil && !n.reaped {
		select {
		case <-n.sim.Quiet():
		case <-n.served: // it never served (no TUN device came)
			n.reaped = true
		}
	}
	if d != nil {
		d.Network = n.sim.Log()
		d.Normalize()
		d.ComputeTotals()
	}
}

// close stops netsim, if finish has not, and waits until it has released
// everything.
func (n *trialNet) close() {
	if n == nil || n.sim == nil {
		return
	}
	n.stop()
	if n.cancel != nil && !n.reaped {
		<-n.served
		n.reaped = true
	}
}
