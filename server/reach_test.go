package server

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/netsim"
)

// TestCheckReach: a rule reaches the daemon's listener by its address and
// port (or any port), and, for a listener on every address, by any address
// of the host, loopback and the unspecified address included.
func TestCheckReach(t *testing.T) {
	var local string
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil && !p.Addr().IsLoopback() {
			local = p.Addr().Unmap().String()
		}
	}
	// Names resolve through a fake: public.example is this host's address,
	// elsewhere.example another's; nothing touches the machine's resolver.
	lookup := func(_ context.Context, h string) ([]netip.Addr, error) {
		switch h {
		case "public.example":
			if local != "" {
				return []netip.Addr{netip.MustParseAddr(local)}, nil
			}
		case "elsewhere.example", "example.org":
			return []netip.Addr{netip.MustParseAddr("203.0.113.9")}, nil
		}
		return nil, errors.New("no such host")
	}
	type reachCase struct {
		listen string
		rule   netsim.Rule
		reach  bool
	}
	tests := []reachCase{
		{"127.0.0.1:8700", netsim.Rule{Host: "127.0.0.1", Port: 8700}, true},
		{"127.0.0.1:8700", netsim.Rule{Host: "127.0.0.1"}, true},
		{"127.0.0.1:8700", netsim.Rule{Host: "127.0.0.1", Port: 8701}, false},
		{"127.0.0.1:8700", netsim.Rule{Host: "localhost", Port: 8700}, true},
		{"127.0.0.1:8700", netsim.Rule{Host: "db.localhost."}, true},
		{"127.0.0.1:8700", netsim.Rule{Host: "0.0.0.0", Port: 8700}, true},
		{"127.0.0.1:8700", netsim.Rule{Host: "::ffff:127.0.0.1", Port: 8700}, true},
		{"127.0.0.1:8700", netsim.Rule{Host: "10.0.0.5", Port: 8700}, false},
		{"127.0.0.1:8700", netsim.Rule{Host: "example.com", Port: 8700}, false},
		{"[::1]:8700", netsim.Rule{Host: "::1"}, true},
		{"[::]:8700", netsim.Rule{Host: "127.0.0.2", Port: 8700}, true},
		{"0.0.0.0:8700", netsim.Rule{Host: "::", Port: 8700}, true},
		{"0.0.0.0:8700", netsim.Rule{Host: "203.0.113.9", Port: 8700}, false},
		{"0.0.0.0:8700", netsim.Rule{Host: "elsewhere.example", Port: 8700}, false},
		{"0.0.0.0:8700", netsim.Rule{Host: "unknown.example"}, false},
		{"0.0.0.0:8700", netsim.Rule{Host: "*.example"}, false}, // a wildcard is not judged
		{"", netsim.Rule{Host: "127.0.0.1"}, false},
		{"/run/dryexec.sock", netsim.Rule{Host: "127.0.0.1"}, false},
	}
	if local != "" {
		tests = append(tests,
			reachCase{"0.0.0.0:8700", netsim.Rule{Host: local}, true},
			reachCase{"[::]:8700", netsim.Rule{Host: local, Port: 8700}, true},
			reachCase{"127.0.0.1:8700", netsim.Rule{Host: local, Port: 8700}, false},
			reachCase{"0.0.0.0:8700", netsim.Rule{Host: "public.example", Port: 8700}, true},
			reachCase{"[::]:8700", netsim.Rule{Host: "public.example"}, true},
			reachCase{"0.0.0.0:8700", netsim.Rule{Host: "public.example", Port: 1}, false})
	}
	for _, tt := range tests {
		err := CheckReach(context.Background(), []netsim.Rule{{Host: "example.org", Port: 443}, tt.rule}, tt.listen, lookup)
		if (err != nil) != tt.reach || (err != nil && !errors.Is(err, ErrReachesDaemon)) {
			t.Errorf("listen %s, rule %+v: %v, want reach %v", tt.listen, tt.rule, err, tt.reach)
		}
	}
}

// TestCheckCommitPaths: a path at or beneath a change or a touched path
// (mtime only) passes; a sibling
// with a common prefix, or a path the trial never touched, is refused with
// what it did change.
func TestCheckCommitPaths(t *testing.T) {
	d := &dryexec.StateDelta{TrialID: "tr_x", Files: []dryexec.FileChange{{Path: "/w/a"}, {Path: "/w/d/x"}},
		Touched: []dryexec.FileChange{{Path: "/w/t/util.o", Op: dryexec.OpTouch}}}
	for _, p := range []string{"/w/a", "/w/d", "/w/d/", "/w/d/x", "/w", "/", "/w/t", "/w/t/util.o"} {
		if err := CheckCommitPaths(d, []string{p}); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	for _, p := range []string{"/w/b", "/w/a-longer", "/w/d/y", "/etc"} {
		if err := CheckCommitPaths(d, []string{"/w/a", p}); !errors.Is(err, ErrPathNotInTrial) {
			t.Errorf("%s: %v, want ErrPathNotInTrial", p, err)
		}
	}
}
