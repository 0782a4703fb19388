package netsim

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"github.com/dryexec/dryexec/netsim/mock"
	"github.com/dryexec/dryexec/netsim/netconf"
)

// flow is where one connection or datagram was going, as netsim knows it:
// name is the DNS name the sandbox resolved through netsim (empty when it used
// a literal address), addr the address it connected to.
type flow struct {
	name  string
	addr  netip.Addr
	port  int
	proto string // "tcp" or "udp"
}

func (f flow) host() string {
	if f.name != "" {
		return f.name
	}
	return f.addr.String()
}

// specialRanges are destinations a name rule never reaches: a rule must name
// the address itself. netsim's own ranges are here so a forwarded connection
// can never loop back into the sandbox's synthetic addresses.
var specialRanges = []struct {
	prefix netip.Prefix
	class  string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "unspecified"},
	{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
	{netip.MustParsePrefix("10.0.0.0/8"), "private"},
	{netip.MustParsePrefix("172.16.0.0/12"), "private"},
	{netip.MustParsePrefix("192.168.0.0/16"), "private"},
	{netip.MustParsePrefix("100.64.0.0/10"), "shared (CGNAT; cloud metadata on some providers)"},
	{netip.MustParsePrefix("169.254.0.0/16"), "link-local (cloud metadata)"},
	{netip.MustParsePrefix("192.0.0.0/24"), "IETF protocol assignments"},
	{netip.MustParsePrefix("198.18.0.0/15"), "benchmarking (netsim's synthetic addresses)"},
	{netip.MustParsePrefix("224.0.0.0/4"), "multicast"},
	{netip.MustParsePrefix("240.0.0.0/4"), "reserved"},
	{netip.MustParsePrefix("::/128"), "unspecified"},
	{netip.MustParsePrefix("::1/128"), "loopback"},
	{netip.MustParsePrefix("fc00::/7"), "private (ULA; cloud metadata on some providers)"},
	{netip.MustParsePrefix("fe80::/10"), "link-local"},
	{netip.MustParsePrefix("ff00::/8"), "multicast"},
}

// special returns the class of a must-be-named address, or "".
func special(a netip.Addr) string {
	a = a.Unmap()
	for _, r := range specialRanges {
		if r.prefix.Contains(a) {
			return r.class
		}
	}
	return ""
}

// ruleAddr is the address a rule names, if it names one.
func ruleAddr(r *Rule) (netip.Addr, bool) {
	a, err := netip.ParseAddr(r.Host)
	return a.Unmap(), err == nil
}

// fits reports whether r's port, method and path conditions hold. method ""
// means raw (non-HTTP) traffic, which only a rule without HTTP conditions
// allows.
func fits(r *Rule, f flow, method, path string) bool {
	if r.Port != 0 && r.Port != f.port {
		return false
	}
	if f.proto == "udp" && !r.UDP {
		return false
	}
	if method == "" {
		return len(r.Methods) == 0 && r.PathPrefix == ""
	}
	if len(r.Methods) > 0 {
		ok := false
		for _, m := range r.Methods {
			if strings.EqualFold(m, method) {
				ok = true
			}
		}
		if !ok {
			return false
		}
	}
	return r.PathPrefix == "" || strings.HasPrefix(path, r.PathPrefix)
}

// decision is the outcome of checking one request against the allow rules.
type decision struct {
	allowed bool
	rule    *Rule
	// dial is the checked address to connect to: never re-resolved, so a
	// name cannot resolve to something else between check and connect.
	dial   netip.Addr
	reason string
}

// candidates reports whether any rule could allow this traffic (before any
// name is resolved: a request no rule could allow never makes the host
// resolve the name).
func (s *Sim) candidates(f flow, method, path string) bool {
	for i := range s.rules {
		r := &s.rules[i]
		if !fits(r, f, method, path) {
			continue
		}
		if _, isAddr := ruleAddr(r); isAddr {
			return true
		}
		if f.name != "" && mock.MatchHost(r.Host, f.name) {
			return true
		}
	}
	return false
}

// decide resolves the destination (on the host) and picks the address to
// dial and the rule that allows it.
func (s *Sim) decide(ctx context.Context, f flow, method, path string) decision {
	if !s.candidates(f, method, path) {
		return decision{reason: "no allow rule matches " + describe(f, method, path)}
	}
	var addrs []netip.Addr
	if f.name == "" {
		addrs = []netip.Addr{f.addr}
	} else {
		var err error
		addrs, err = s.lookup(ctx, f.name)
		if err != nil || len(addrs) == 0 {
			return decision{reason: fmt.Sprintf("resolving %s on the host failed: %v", f.name, err)}
		}
	}
	var refused []string
	for _, a := range addrs {
		a = a.Unmap()
		// An explicit address rule wins and may name anything.
		for i := range s.rules {
			r := &s.rules[i]
			if ra, isAddr := ruleAddr(r); isAddr && ra == a && fits(r, f, method, path) {
				return decision{allowed: true, rule: r, dial: a, reason: "allowed by rule " + netconf.RuleString(r)}
			}
		}
		if f.name == "" {
			continue
		}
		for i := range s.rules {
			r := &s.rules[i]
			if _, isAddr := ruleAddr(r); isAddr || !mock.MatchHost(r.Host, f.name) || !fits(r, f, method, path) {
				continue
			}
			if class := special(a); class != "" {
				refused = append(refused, fmt.Sprintf("%s resolves to %s (%s): name the address in a rule to allow it", f.name, a, class))
				continue
			}
			return decision{allowed: true, rule: r, dial: a, reason: "allowed by rule " + netconf.RuleString(r)}
		}
	}
	if len(refused) > 0 {
		return decision{reason: refused[0]}
	}
	return decision{reason: "no allow rule matches " + describe(f, method, path)}
}

func (s *Sim) lookup(ctx context.Context, name string) ([]netip.Addr, error) {
	if s.cfg.LookupHost != nil {
		return s.cfg.LookupHost(ctx, name)
	}
	return net.DefaultResolver.LookupNetIP(ctx, "ip", name)
}

func describe(f flow, method, path string) string {
	hp := net.JoinHostPort(f.host(), fmt.Sprint(f.port))
	if method == "" {
		return f.proto + " " + hp
	}
	return method + " " + hp + path
}
