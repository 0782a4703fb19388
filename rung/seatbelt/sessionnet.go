//go:build linux || darwin

package seatbelt

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/dryexec/dryexec"
)

// sessionNet is a seatbelt session's network and its reading of what
// Seatbelt denied: one netsim serving as the HTTP proxy of every exec for
// the session's life (as a trial's, net.go), and the session's own tag on
// its profile's deny rules (denials.go).
//
// Package session splits the network log per exec by its length: it reads
// Network before an exec and keeps what was appended after. So the log
// here is one list that only grows: netsim's events as they complete
// (a request is logged before its answer's last bytes leave netsim), and
// the direct connections Seatbelt denied, which the unified log delivers
// late, read up to a marker each time Network or Violations is called. An
// exec's denials are therefore in its own part of the log, not the next
// one's.
//
// Network and Violations called together (one after the other, as a
// session's result or park reads both) share one marker: the second reuses
// the first's wait when nothing was sent to the guest since (sent), so no
// exec can have started in between. Only a process left running in the
// background could be denied meanwhile, and its denial is read with the
// next call's marker: late, never lost, as it would be anyway for a
// report the kernel delivers after the wait.
type sessionNet struct {
	nw  *proxyNet
	tag string
	// sent counts the writes to the guest's control connection
	// (sentConn): a request since a wait means an exec may have run.
	sent atomic.Uint64

	mu      sync.Mutex
	pr      Profile
	watch   *denialLog // nil: denials are not recorded (warns says why)
	warns   []string
	log     []dryexec.NetworkEvent
	simSeen int
	vio     []dryexec.Violation // not yet returned by Violations
	seen    map[string]bool     // paths reported as secret violations
	closed  bool
	// spare is the reader whose next call may reuse the last wait, the
	// other one's, if sent is still spareAt; readNone: none may.
	spare   reader
	spareAt uint64
}

// reader is who reads the denials: Network, Violations or close.
type reader int

const (
	readNone reader = iota
	readNetwork
	readViolations
	readClose
)

// sentConn is the guest's control connection, counting what the host
// writes to it in sessionNet.sent.
type sentConn struct {
	io.ReadWriteCloser
	sent *atomic.Uint64
}

func (c *sentConn) Write(b []byte) (int, error) {
	c.sent.Add(1)
	return c.ReadWriteCloser.Write(b)
}

// openSessionNet starts netsim for spec's network (--net none when it
// names none: every request refused and logged) as a proxy on a loopback
// port, its trust bundle written to bundle, and makes the session's tag.
// The profile is built from both, then watchDenials starts reading denials.
func openSessionNet(ctx context.Context, spec dryexec.SandboxSpec, getenv func(string) string, bundle string) (*sessionNet, error) {
	cfg, err := netConfig(dryexec.TrialSpec{Net: spec.Net, NetCADir: spec.NetCADir, TrialID: spec.ID}, getenv)
	if err != nil {
		return nil, err
	}
	tag, err := newTag()
	if err != nil {
		return nil, err
	}
	nw, err := startNet(ctx, cfg, bundle)
	if err != nil {
		return nil, err
	}
	return &sessionNet{nw: nw, tag: tag, seen: map[string]bool{}}, nil
}

// watchDenials starts reading the denials of pr (built with n's port and tag,
// hiding marks) through start (nil: none are read, as on Linux).
func (n *sessionNet) watchDenials(ctx context.Context, pr Profile, marks string, start func(ctx context.Context, marks, tag string) (*denialLog, string)) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.pr = pr
	if start == nil {
		return
	}
	var warn string
	if n.watch, warn = start(ctx, marks, n.tag); warn != "" {
		n.warns = append(n.warns, warn)
	}
}

// env is the exec environment env (KEY=VALUE) with the session's private
// tmp and netsim's proxy and trust variables over it, as a trial's
// (environ).
func (n *sessionNet) env(env []string, tmp string) []string {
	vars := make(map[string]string, len(env))
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		vars[k] = v
	}
	return withNet(vars, tmp, n.nw.env)
}

// catchUp appends to the log what netsim and Seatbelt's reports hold that
// it does not yet: denials are read up to a new marker, unless by is the
// spare reader of the last one's (sessionNet). Called with n.mu.
func (n *sessionNet) catchUp(by reader) {
	if n.closed {
		return
	}
	var denied []denial
	switch {
	case n.watch == nil:
	case by == n.spare && n.sent.Load() == n.spareAt:
		n.spare = readNone // the other's wait serves this call too
	default:
		// Counted before the marker: a request sent during the wait may
		// have started an exec the marker does not cover.
		at := n.sent.Load()
		var err error
		if denied, err = n.watch.take(context.Background()); err != nil {
			n.warnOnce(missingWarning(err))
		}
		n.spare, n.spareAt = readNone, at
		switch by {
		case readNetwork:
			n.spare = readViolations
		case readViolations:
			n.spare = readNetwork
		}
	}
	sim := n.nw.sim.Log()
	n.log = append(n.log, sim[n.simSeen:]...)
	n.simSeen = len(sim)
	n.log = append(n.log, n.pr.networkEvents(denied)...)
	for _, v := range n.pr.violations(denied, func(p string) string { return p }) {
		if !n.seen[v.Detail] {
			n.seen[v.Detail] = true
			n.vio = append(n.vio, v)
		}
	}
}

func (n *sessionNet) warnOnce(w string) {
	if !slices.Contains(n.warns, w) {
		n.warns = append(n.warns, w)
	}
}

// Network is every network event so far: netsim's and the direct
// connections Seatbelt denied, in the order read.
func (n *sessionNet) Network() []dryexec.NetworkEvent {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.catchUp(readNetwork)
	return slices.Clone(n.log)
}

// Violations are the masked paths read since the last call, each path
// once in the session's life.
func (n *sessionNet) Violations() []dryexec.Violation {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.catchUp(readViolations)
	v := n.vio
	n.vio = nil
	return v
}

// Warnings say what of the network's record may be missing.
func (n *sessionNet) Warnings() []string {
	n.mu.Lock()
	defer n.mu.Unlock()
	w := slices.Clone(n.warns)
	if k := n.nw.sim.Dropped(); k > 0 {
		w = append(w, fmt.Sprintf("network log: %d events past the first %d not kept", k, n.simSeen))
	}
	return w
}

// close reads what is left (the guest and its commands are gone), stops
// the denial stream and netsim; the log stays readable. Later calls do
// nothing.
func (n *sessionNet) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return
	}
	n.catchUp(readClose)
	n.watch.close()
	var d dryexec.StateDelta
	if err := n.nw.finish(&d); err != nil {
		n.warns = append(n.warns, "seatbelt: netsim's proxy: "+err.Error())
	}
	// finish waited for netsim's last handlers: their events too.
	sim := n.nw.sim.Log()
	n.log = append(n.log, sim[n.simSeen:]...)
	n.simSeen = len(sim)
	n.closed = true
}
