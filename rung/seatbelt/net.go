//go:build linux || darwin

package seatbelt

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/netsim"
)

// Seatbelt cannot hand the command a network device to intercept: it can
// only allow or deny a connection. So netsim runs in dryexec's process as
// an HTTP proxy on a loopback port, the command is told of it (the proxy
// variables), and the profile denies every network operation but a
// connection to that port. Whatever ignores the proxy variables is denied
// by the kernel, and its attempt is logged only through Seatbelt's own
// report (denials.go).

// macBundle is macOS's PEM file of the system's roots, what tools built
// on OpenSSL or LibreSSL (curl, python, git) read; Security.framework
// clients (Go's crypto/x509 on macOS, Safari, URLSession) ask trustd, which
// the profile does not reach, and do not trust netsim's CA.
const macBundle = "/etc/ssl/cert.pem"

// proxyVars are the variables clients read for an HTTP(S) proxy; curl reads
// only the lower-case http_proxy, Go and python either.
var proxyVars = []string{"http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy", "ALL_PROXY"}

// noProxyVars would send some destinations around the proxy, where the
// profile denies them: removed from the command's environment.
var noProxyVars = []string{"no_proxy", "NO_PROXY"}

// netConfig is the netsim configuration spec.Net asks for (none when it
// asks for nothing), its CA in spec.NetCADir or the install's netsim-ca.
func netConfig(spec dryexec.TrialSpec, getenv func(string) string) (*netsim.Config, error) {
	specs := spec.Net
	if len(specs) == 0 {
		specs = []string{"none"}
	}
	cfg := netsim.Config{CADir: spec.NetCADir, Seed: netsim.SeedOf(spec.TrialID)}
	for _, s := range specs {
		if err := cfg.AddSpec(s); err != nil {
			return nil, fmt.Errorf("%w: --net %s: %w", dryexec.ErrBadAction, s, err)
		}
	}
	if cfg.CADir == "" {
		home, err := dryexec.DefaultHome(getenv)
		if err != nil {
			return nil, err
		}
		cfg.CADir = filepath.Join(home, "netsim-ca")
	}
	return &cfg, nil
}

// proxyNet is one trial's netsim, serving as its proxy.
type proxyNet struct {
	sim    *netsim.Sim
	port   int
	env    map[string]string
	cancel context.CancelFunc
	served chan error
}

// startNet starts netsim for cfg as a proxy on a loopback port, writes the
// trust bundle for the command to bundle (a path the profile lets it read,
// not write) and returns what the command's environment needs.
func startNet(ctx context.Context, cfg *netsim.Config, bundle string) (*proxyNet, error) {
	// The proxy's port is on the host's loopback: a password of the
	// trial's own (in the proxy URL, which clients turn into
	// Proxy-Authorization) keeps other local programs from using it.
	token := make([]byte, 16)
	if _, err := rand.Read(token); err != nil {
		return nil, err
	}
	c := *cfg
	c.ProxyToken = hex.EncodeToString(token)
	sim, err := netsim.New(ctx, c)
	if err != nil {
		return nil, err
	}
	system, _ := os.ReadFile(macBundle) // absent on Linux: the CA alone
	if err := os.WriteFile(bundle, append(append([]byte{}, system...), sim.Trust().CAPEM...), 0o444); err != nil {
		return nil, err
	}
	lis, err := listenLoopback()
	if err != nil {
		return nil, fmt.Errorf("seatbelt: netsim's proxy: %w", err)
	}
	port := lis[0].Addr().(*net.TCPAddr).Port
	n := &proxyNet{sim: sim, port: port, served: make(chan error, 1), env: netsim.TrustEnv(bundle)}
	url := "http://dryexec:" + c.ProxyToken + "@127.0.0.1:" + strconv.Itoa(port)
	for _, k := range proxyVars {
		n.env[k] = url
	}
	var sctx context.Context
	sctx, n.cancel = context.WithCancel(context.WithoutCancel(ctx))
	go func() { n.served <- sim.ServeProxy(sctx, lis...) }()
	return n, nil
}

// listenLoopback listens on a port of 127.0.0.1 and, where the host has
// IPv6 loopback, the same port of ::1: the profile's one allowed
// destination is "localhost:PORT", which is both, so no other program may
// hold ::1's PORT for the command to reach.
func listenLoopback() ([]net.Listener, error) {
	for range 16 {
		l4, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		port := l4.Addr().(*net.TCPAddr).Port
		l6, err := net.Listen("tcp6", net.JoinHostPort("::1", strconv.Itoa(port)))
		switch {
		case err == nil:
			return []net.Listener{l4, l6}, nil
		case errors.Is(err, syscall.EADDRINUSE):
			l4.Close() // someone has ::1's port: another one
		default:
			return []net.Listener{l4}, nil // no IPv6 loopback: nothing can listen there
		}
	}
	return nil, errors.New("no port free on both 127.0.0.1 and ::1")
}

// finish stops netsim (the command and everything it started are gone)
// and puts its log in d.
func (n *proxyNet) finish(d *dryexec.StateDelta) error {
	n.cancel()
	err := <-n.served
	d.Network = append(d.Network, n.sim.Log()...)
	if k := n.sim.Dropped(); k > 0 {
		d.Warnings = append(d.Warnings, fmt.Sprintf("network log: %d events past the first %d not kept", k, len(n.sim.Log())))
	}
	return err
}

// close stops netsim if finish has not.
func (n *proxyNet) close() {
	n.cancel()
}
