package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/netsim"
)

// ErrReachesDaemon: an allow rule would let a sandbox talk to the daemon's
// own API. With its bearer token (or the host's unix socket) that API commits
// trials to the host: a trial once did exactly that through such a rule.
var ErrReachesDaemon = errors.New("the network rule reaches dryexec's own API")

// ListenFile is where a daemon serving TCP records its address while it
// runs, so that a `dryexec run` beside it refuses the rules that reach it.
func ListenFile(stateDir string) string { return filepath.Join(stateDir, "listen") }

// ReadListen returns the address a daemon of this state dir listens on, or
// "" when none serves TCP.
func ReadListen(stateDir string) string {
	b, err := os.ReadFile(ListenFile(stateDir))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Lookup resolves a host name on the host, as netsim will; nil means the
// host's resolver.
type Lookup func(ctx context.Context, host string) ([]netip.Addr, error)

// CheckReach refuses every rule that could reach listen, a daemon's TCP
// address as its listener reports it ("127.0.0.1:8700", "[::]:8700"). A
// rule reaches it when its port is listen's or any (0) and its host is
// listen's address; for a listener on every address (0.0.0.0, ::) any
// address of this host, loopback included; "localhost", "*.localhost" and
// the unspecified address (connecting to it reaches the host itself) count
// as loopback. A rule naming a host name is resolved now (lookup; nil: the
// host's resolver, bounded by ctx) when the listener could be reached
// through a name at all, i.e. it is not on a loopback or private address
// (netsim lets a name reach those only through an address rule, judged
// here): a name that resolves to the listener is refused. A wildcard rule
// (*.example.com) cannot be resolved and is not judged.
func CheckReach(ctx context.Context, rules []netsim.Rule, listen string, lookup Lookup) error {
	if listen == "" {
		return nil
	}
	ap, err := netip.ParseAddrPort(listen)
	if err != nil {
		return nil // a unix socket: no network rule reaches it
	}
	la := ap.Addr().Unmap()
	var local map[netip.Addr]bool
	hits := func(a netip.Addr) bool {
		a = a.Unmap()
		if a == la || (a.IsUnspecified() && (la.IsLoopback() || la.IsUnspecified())) {
			return true
		}
		if !la.IsUnspecified() {
			return false
		}
		if local == nil {
			local = localAddrs()
		}
		return a.IsLoopback() || a.IsUnspecified() || local[a]
	}
	byName := la.IsUnspecified() || !(la.IsLoopback() || la.IsPrivate() || la.IsLinkLocalUnicast())
	if lookup == nil {
		lookup = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	for _, r := range rules {
		if r.Port != 0 && r.Port != int(ap.Port()) {
			continue
		}
		var hosts []netip.Addr
		h := strings.ToLower(strings.TrimSuffix(r.Host, "."))
		switch a, err := netip.ParseAddr(h); {
		case h == "localhost" || strings.HasSuffix(h, ".localhost"):
			hosts = []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()}
		case err == nil:
			hosts = []netip.Addr{a}
		case byName && !strings.HasPrefix(h, "*."):
			lctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			hosts, _ = lookup(lctx, h) // a name that does not resolve reaches nothing
			cancel()
		}
		for _, a := range hosts {
			if hits(a) {
				via := ""
				if a.String() != h {
					via = " (it resolves to " + a.String() + ")"
				}
				return fmt.Errorf("%w: allow rule %s%s would reach the dryexec daemon listening on %s; no rule may name it: allow another port, or the service's own address",
					ErrReachesDaemon, ruleText(r), via, listen)
			}
		}
	}
	return nil
}

// localAddrs lists this host's interface addresses.
func localAddrs() map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out[p.Addr().Unmap()] = true
		}
	}
	return out
}

func ruleText(r netsim.Rule) string {
	h := r.Host
	if strings.Contains(h, ":") {
		h = "[" + h + "]"
	}
	if r.Port != 0 {
		return fmt.Sprintf("%s:%d", h, r.Port)
	}
	return h + " (any port)"
}

// ErrPathNotInTrial: a commit named a path at and beneath which the trial
// changed nothing. Nothing was committed.
var ErrPathNotInTrial = errors.New("the trial changed nothing there")

// CheckCommitPaths refuses, before the commit takes any lock or touches the
// host, a selected path at and beneath which d changed nothing (no change and
// no touched path), naming what it did change.
func CheckCommitPaths(d *dryexec.StateDelta, paths []string) error {
	for _, p := range paths {
		dir := strings.TrimSuffix(p, "/") + "/"
		errFound := errors.New("found")
		err := d.EachFile(func(f *dryexec.FileChange) error {
			if f.Path == p || strings.HasPrefix(f.Path, dir) {
				return errFound
			}
			return nil
		})
		if err != nil && !errors.Is(err, errFound) {
			return err
		}
		// A path whose mtime alone moved is committed too (its mtime).
		for i := 0; err == nil && i < len(d.Touched); i++ {
			if f := d.Touched[i].Path; f == p || strings.HasPrefix(f, dir) {
				err = errFound
			}
		}
		if err == nil {
			var changed []string
			errEnough := errors.New("enough")
			if err := d.EachFile(func(f *dryexec.FileChange) error {
				if len(changed) == 3 {
					changed = append(changed, "…")
					return errEnough
				}
				changed = append(changed, dryexec.QuotePath(f.Path))
				return nil
			}); err != nil && !errors.Is(err, errEnough) {
				return err
			}
			what := "nothing at all"
			if len(changed) > 0 {
				what = strings.Join(changed, ", ")
			}
			return fmt.Errorf("%w: %s changed nothing at or beneath %s (it changed %s; dryexec show %s lists them)",
				ErrPathNotInTrial, d.TrialID, dryexec.QuotePath(p), what, d.TrialID)
		}
	}
	return nil
}
