package server

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

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

// CheckReach refuses every rule that could reach listen, a daemon's TCP
// address as its listener reports it ("127.0.0.1:8700", "[::]:8700"). A
// rule reaches it when its port is listen's or any (0) and its host is
// listen's address; for a listener on every address (0.0.0.0, ::) any
// address of this host, loopback included; "localhost", "*.localhost" and
// the unspecified address (connecting to it reaches the host itself) count
// as loopback. A rule naming another host name is judged when netsim
// resolves it, not here: a name that resolves to a loopback or private
// address needs an address rule for it, which is judged here.
func CheckReach(rules []netsim.Rule, listen string) error {
	if listen == "" {
		return nil
	}
	ap, err := netip.ParseAddrPort(listen)
	if err != nil {
		return nil // a unix socket: no network rule reaches it
	}
	la := ap.Addr().Unmap()
	var local map[netip.Addr]bool
	for _, r := range rules {
		if r.Port != 0 && r.Port != int(ap.Port()) {
			continue
		}
		var hosts []netip.Addr
		h := strings.ToLower(strings.TrimSuffix(r.Host, "."))
		if h == "localhost" || strings.HasSuffix(h, ".localhost") {
			hosts = []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.IPv6Loopback()}
		} else if a, err := netip.ParseAddr(h); err == nil {
			hosts = []netip.Addr{a.Unmap()}
		}
		for _, a := range hosts {
			hit := a == la || (a.IsUnspecified() && (la.IsLoopback() || la.IsUnspecified()))
			if !hit && la.IsUnspecified() {
				if local == nil {
					local = localAddrs()
				}
				hit = a.IsLoopback() || a.IsUnspecified() || local[a]
			}
			if hit {
				return fmt.Errorf("%w: allow rule %s would reach the dryexec daemon listening on %s; no rule may name it: allow another port, or the service's own address",
					ErrReachesDaemon, ruleText(r), listen)
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
// host, a selected path at and beneath which d changed nothing, naming what
// it did change.
func CheckCommitPaths(d *dryexec.StateDelta, paths []string) error {
	for _, p := range paths {
		dir := strings.TrimSuffix(p, "/") + "/"
		found := false
		for i := range d.Files {
			if f := d.Files[i].Path; f == p || strings.HasPrefix(f, dir) {
				found = true
				break
			}
		}
		if !found {
			var changed []string
			for i := range d.Files {
				if len(changed) == 3 {
					changed = append(changed, "…")
					break
				}
				changed = append(changed, dryexec.QuotePath(d.Files[i].Path))
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
