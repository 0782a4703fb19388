package netsim

import (
	"net/netip"
	"strings"
	"sync"

	"golang.org/x/net/dns/dnsmessage"
)

// synthetic is the range DNS answers come from (RFC 2544 benchmarking, never
// routed on the internet); each name gets one address for the Sim's life.
var synthetic = netip.MustParsePrefix("198.18.0.0/15")

// names maps DNS names to synthetic addresses and back.
type names struct {
	// mu guards the fields below.
	mu     sync.Mutex
	byName map[string]netip.Addr
	byAddr map[netip.Addr]string
	next   netip.Addr
}

func newNames() *names {
	return &names{byName: map[string]netip.Addr{}, byAddr: map[netip.Addr]string{}, next: synthetic.Addr().Next()}
}

func canonical(name string) string { return strings.TrimSuffix(strings.ToLower(name), ".") }

// addrFor returns name's synthetic address, allocating one the first time.
func (n *names) addrFor(name string) (netip.Addr, bool) {
	name = canonical(name)
	n.mu.Lock()
	defer n.mu.Unlock()
	if a, ok := n.byName[name]; ok {
		return a, true
	}
	if !synthetic.Contains(n.next) {
		return netip.Addr{}, false
	}
	a := n.next
	n.next = a.Next()
	n.byName[name] = a
	n.byAddr[a] = name
	return a, true
}

func (n *names) nameOf(a netip.Addr) string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.byAddr[a.Unmap()]
}

// dnsAnswer builds the reply to one query packet. It reports the question's
// name and type for the log; ok is false when the packet is not a query worth
// answering (garbage is dropped, as a resolver would).
func (s *Sim) dnsAnswer(pkt []byte) (reply []byte, name, qtype string, action, reason string, ok bool) {
	var p dnsmessage.Parser
	h, err := p.Start(pkt)
	if err != nil || h.Response {
		return nil, "", "", "", "", false
	}
	q, err := p.Question()
	if err != nil {
		return nil, "", "", "", "", false
	}
	name = canonical(q.Name.String())
	qtype = strings.TrimPrefix(q.Type.String(), "Type")
	rh := dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode, RecursionDesired: h.RecursionDesired, RecursionAvailable: true, Authoritative: true}
	var answer *netip.Addr
	switch {
	case s.mode == "none":
		rh.RCode = dnsmessage.RCodeRefused
		action, reason = ActionBlocked, "network mode none: DNS refused"
	case q.Class != dnsmessage.ClassINET:
		rh.RCode = dnsmessage.RCodeNotImplemented
		action, reason = ActionBlocked, "not an Internet-class query"
	case q.Type == dnsmessage.TypeA:
		a, allocated := s.names.addrFor(name)
		if !allocated {
			rh.RCode = dnsmessage.RCodeServerFailure
			action, reason = ActionBlocked, "synthetic address pool exhausted"
			break
		}
		answer = &a
		action, reason = ActionMocked, "synthetic address "+a.String()
	default:
		// AAAA and the rest get an empty answer: clients fall back to A,
		// so there is one synthetic address family to map back.
		action, reason = ActionMocked, "no "+qtype+" records (netsim answers A only)"
	}
	b := dnsmessage.NewBuilder(nil, rh)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, "", "", "", "", false
	}
	if err := b.Question(q); err != nil {
		return nil, "", "", "", "", false
	}
	if answer != nil {
		if err := b.StartAnswers(); err != nil {
			return nil, "", "", "", "", false
		}
		if err := b.AResource(dnsmessage.ResourceHeader{Name: q.Name, Class: dnsmessage.ClassINET, TTL: 60}, dnsmessage.AResource{A: answer.As4()}); err != nil {
			return nil, "", "", "", "", false
		}
	}
	out, err := b.Finish()
	if err != nil {
		return nil, "", "", "", "", false
	}
	return out, name, qtype, action, reason, true
}
