package netsim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/dryexec/dryexec/netsim/tun"
	"gvisor.dev/gvisor/pkg/buffer"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/adapters/gonet"
	"gvisor.dev/gvisor/pkg/tcpip/header"
	"gvisor.dev/gvisor/pkg/tcpip/link/channel"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv4"
	"gvisor.dev/gvisor/pkg/tcpip/network/ipv6"
	"gvisor.dev/gvisor/pkg/tcpip/stack"
	"gvisor.dev/gvisor/pkg/tcpip/transport/tcp"
	"gvisor.dev/gvisor/pkg/tcpip/transport/udp"
	"gvisor.dev/gvisor/pkg/waiter"
)

const nicID tcpip.NICID = 1

// ErrServed: a Sim serves one link in its life.
var ErrServed = errors.New("netsim: Serve already called")

// Serve runs the network of one sandbox over link, which carries raw IP
// packets, one per Read and one per Write (a TUN device without packet info;
// a VM's virtio-net with the Ethernet header stripped: etherLink). It returns when
// ctx is done or the link fails, after every connection handler has logged
// its event; it closes link.
func (s *Sim) Serve(ctx context.Context, link io.ReadWriteCloser) error {
	if !s.claimServe() {
		link.Close()
		return ErrServed
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.http = s.startHTTP(ctx)
	st, ep, err := s.newStack(ctx, link)
	if err != nil {
		s.markQuiet()
		link.Close()
		s.http.lis.Close()
		s.http.srv.Close()
		return err
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		<-ctx.Done()
		link.Close()
	}()
	buf := make([]byte, 65536)
	var readErr error
	for {
		n, err := link.Read(buf)
		if err != nil {
			readErr = err
			break
		}
		s.inbound(ep, buf[:n])
	}
	// Order: the attempts no handler took are logged, no new work, close
	// every sandbox connection (the stack), stop the HTTP server, then wait
	// for the handlers still writing events.
	s.endSYNs()
	cancel()
	ep.Close()
	st.Close()
	s.http.lis.Close()
	s.http.srv.Close()
	s.work.closeAndWait()
	s.markQuiet()
	wg.Wait()
	st.Wait()
	s.transport.CloseIdleConnections()
	if ctx.Err() != nil || errors.Is(readErr, io.EOF) || errors.Is(readErr, net.ErrClosed) {
		return nil
	}
	return fmt.Errorf("netsim: reading the link: %w", readErr)
}

// claimServe reports whether this is the Sim's first Serve or ServeProxy:
// a Sim serves one sandbox in its life.
func (s *Sim) claimServe() bool {
	s.serveMu.Lock()
	defer s.serveMu.Unlock()
	if s.served {
		return false
	}
	s.served = true
	return true
}

func (s *Sim) newStack(ctx context.Context, link io.Writer) (*stack.Stack, *linkEndpoint, error) {
	st := stack.New(stack.Options{
		NetworkProtocols:   []stack.NetworkProtocolFactory{ipv4.NewProtocol, ipv6.NewProtocol},
		TransportProtocols: []stack.TransportProtocolFactory{tcp.NewProtocol, udp.NewProtocol},
	})
	ep := &linkEndpoint{Endpoint: channel.New(1, tun.MTU, ""), w: link, log: s.log}
	if err := st.CreateNIC(nicID, ep); err != nil {
		return nil, nil, fmt.Errorf("netsim: creating NIC: %s", err)
	}
	// Promiscuous + spoofing: the stack accepts packets for every address
	// and answers from it, so every destination terminates here.
	if err := st.SetPromiscuousMode(nicID, true); err != nil {
		return nil, nil, fmt.Errorf("netsim: promiscuous mode: %s", err)
	}
	if err := st.SetSpoofing(nicID, true); err != nil {
		return nil, nil, fmt.Errorf("netsim: spoofing: %s", err)
	}
	st.SetRouteTable([]tcpip.Route{
		{Destination: header.IPv4EmptySubnet, NIC: nicID},
		{Destination: header.IPv6EmptySubnet, NIC: nicID},
	})
	sack := tcpip.TCPSACKEnabled(true)
	st.SetTransportProtocolOption(tcp.ProtocolNumber, &sack)

	tcpFwd := tcp.NewForwarder(st, 0, 1024, func(r *tcp.ForwarderRequest) { s.onTCP(ctx, r) })
	st.SetTransportProtocolHandler(tcp.ProtocolNumber, func(id stack.TransportEndpointID, pkt *stack.PacketBuffer) bool {
		s.noteSYN(id, pkt)
		return tcpFwd.HandlePacket(id, pkt)
	})
	udpFwd := udp.NewForwarder(st, func(r *udp.ForwarderRequest) bool { return s.onUDP(ctx, r) })
	st.SetTransportProtocolHandler(udp.ProtocolNumber, udpFwd.HandlePacket)
	return st, ep, nil
}

// linkEndpoint is the stack's side of the link: inbound packets are
// injected through the embedded channel endpoint; outbound ones are written
// to the link at once by the stack's goroutine (no queue and no extra
// goroutine hand-off per packet, which costs most in a nested VM).
type linkEndpoint struct {
	*channel.Endpoint
	log *slog.Logger
	// mu guards w and buf: the stack writes from several goroutines, and
	// one packet must be one Write.
	mu  sync.Mutex
	w   io.Writer
	buf []byte
}

// WritePackets writes each packet to the link.
func (e *linkEndpoint) WritePackets(pkts stack.PacketBufferList) (int, tcpip.Error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, pkt := range pkts.AsSlice() {
		e.buf = e.buf[:0]
		for _, sl := range pkt.AsSlices() {
			e.buf = append(e.buf, sl...)
		}
		if _, err := e.w.Write(e.buf); err != nil {
			e.log.Debug("netsim: writing to the link", "err", err)
			return n, &tcpip.ErrClosedForSend{}
		}
		n++
	}
	return n, nil
}

// inbound hands one packet from the sandbox to the stack. Only TCP and UDP
// reach it: ICMP echo requests are logged as blocked and dropped (the stack
// would otherwise answer pings for every address and fake reachability), and
// every other protocol is dropped.
func (s *Sim) inbound(ep *linkEndpoint, pkt []byte) {
	if len(pkt) < 1 {
		return
	}
	var proto tcpip.NetworkProtocolNumber
	var transport tcpip.TransportProtocolNumber
	switch pkt[0] >> 4 {
	case 4:
		if len(pkt) < header.IPv4MinimumSize {
			return
		}
		ip := header.IPv4(pkt)
		transport = ip.TransportProtocol()
		if transport == header.ICMPv4ProtocolNumber {
			hl := int(ip.HeaderLength())
			if len(pkt) > hl && header.ICMPv4(pkt[hl:]).Type() == header.ICMPv4Echo {
				s.logICMP(netip.AddrFrom4(ip.DestinationAddress().As4()))
			}
			return
		}
		proto = header.IPv4ProtocolNumber
	case 6:
		if len(pkt) < header.IPv6MinimumSize {
			return
		}
		ip := header.IPv6(pkt)
		// Not-first fragments report their transport without ok; the
		// stack reassembles them.
		transport, _ = ip.TryParseTransportProtocol()
		if transport == header.ICMPv6ProtocolNumber {
			if ip.NextHeader() == uint8(header.ICMPv6ProtocolNumber) && len(pkt) > header.IPv6MinimumSize &&
				header.ICMPv6(pkt[header.IPv6MinimumSize:]).Type() == header.ICMPv6EchoRequest {
				s.logICMP(netip.AddrFrom16(ip.DestinationAddress().As16()))
			}
			return
		}
		proto = header.IPv6ProtocolNumber
	default:
		return
	}
	if transport != header.TCPProtocolNumber && transport != header.UDPProtocolNumber {
		return
	}
	pb := stack.NewPacketBuffer(stack.PacketBufferOptions{Payload: buffer.MakeWithData(pkt)})
	ep.InjectInbound(proto, pb)
	pb.DecRef()
}

func (s *Sim) logICMP(dst netip.Addr) {
	host := dst.String()
	if n := s.names.nameOf(dst); n != "" {
		host = n
	}
	s.record(Record{NetworkEvent: eventOf("icmp", "", "", host, 0, 0, ActionBlocked, "ICMP is never forwarded")})
}

func addrOf(a tcpip.Address) netip.Addr {
	ip, _ := netip.AddrFromSlice(a.AsSlice())
	return ip.Unmap()
}

func (s *Sim) flowOf(a tcpip.Address, port uint16, proto string) flow {
	dst := addrOf(a)
	return flow{name: s.names.nameOf(dst), addr: dst, port: int(port), proto: proto}
}

func (s *Sim) onTCP(ctx context.Context, r *tcp.ForwarderRequest) {
	id := r.ID()
	noted, logged := s.syns.take(id)
	if noted {
		defer s.work.done()
	}
	if logged {
		r.Complete(true)
		return
	}
	f := s.flowOf(id.LocalAddress, id.LocalPort, "tcp")
	// A refusal is logged before the sandbox gets it (the RST): what a
	// session's exec saw refused is in that exec's own list.
	if s.mode == "none" {
		s.record(Record{NetworkEvent: eventOf("tcp", "", "", f.host(), f.port, 0, ActionBlocked, "network mode none")})
		r.Complete(true)
		return
	}
	if synthetic.Contains(f.addr) && f.name == "" {
		s.record(Record{NetworkEvent: eventOf("tcp", "", "", f.host(), f.port, 0, ActionBlocked, "address was never handed out by netsim DNS")})
		r.Complete(true)
		return
	}
	var wq waiter.Queue
	ep, terr := r.CreateEndpoint(&wq)
	if terr != nil {
		r.Complete(true)
		s.log.Debug("netsim: accepting", "flow", f.host(), "err", terr)
		return
	}
	r.Complete(false)
	ep.SocketOptions().SetKeepAlive(true)
	conn := gonet.NewTCPConn(&wq, ep)
	reset := func() {
		// Linger 0 makes Close send RST: a refused flow looks refused.
		ep.SocketOptions().SetLinger(tcpip.LingerOption{Enabled: true, Timeout: 0})
		conn.Close()
	}
	if !s.work.add() {
		reset()
		if ctx.Err() == nil {
			s.record(Record{NetworkEvent: eventOf("tcp", "", "", f.host(), f.port, 0, ActionBlocked, fmt.Sprintf("more than %d connections at once", maxWork))})
		}
		return
	}
	go func() {
		defer s.work.done()
		s.handleConn(ctx, conn, f, reset)
	}()
}

func (s *Sim) onUDP(ctx context.Context, r *udp.ForwarderRequest) bool {
	id := r.ID()
	f := s.flowOf(id.LocalAddress, id.LocalPort, "udp")
	if f.port != 53 {
		// This handler runs on the stack's dispatch path: a decision that
		// may resolve a name on the host happens in the flow's goroutine.
		if s.mode == "none" || !s.candidates(f, "", "") {
			s.record(Record{NetworkEvent: eventOf("udp", "", "", f.host(), f.port, 0, ActionBlocked, "no allow rule for udp "+f.host())})
			return true
		}
		var wq waiter.Queue
		ep, terr := r.CreateEndpoint(&wq)
		if terr != nil {
			return true
		}
		c := gonet.NewUDPConn(&wq, ep)
		if !s.work.add() {
			c.Close()
			return true
		}
		go func() {
			defer s.work.done()
			s.relayUDP(ctx, c, f)
		}()
		return true
	}
	var wq waiter.Queue
	ep, terr := r.CreateEndpoint(&wq)
	if terr != nil {
		return true
	}
	c := gonet.NewUDPConn(&wq, ep)
	if !s.work.add() {
		c.Close()
		return true
	}
	go func() {
		defer s.work.done()
		s.serveDNS(ctx, c, f)
	}()
	return true
}

// dnsIdle is how long a DNS client socket is kept after its last query:
// resolvers send A and AAAA back to back from one socket; a retry after
// this is simply a new flow.
const dnsIdle = 500 * time.Millisecond

// serveDNS answers the queries of one client socket (flow f) until it goes
// quiet.
func (s *Sim) serveDNS(ctx context.Context, c *gonet.UDPConn, f flow) {
	defer c.Close()
	buf := make([]byte, 4096)
	for ctx.Err() == nil {
		c.SetReadDeadline(time.Now().Add(dnsIdle))
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		reply, name, qtype, action, reason, ok := s.dnsAnswer(buf[:n])
		if !ok {
			// Dropped, as a resolver would, but on record: every datagram
			// the sandbox sends is (port 53 is no way to send unseen).
			ev := eventOf("udp", "", "", f.host(), f.port, 0, ActionBlocked, "not a DNS query: dropped")
			ev.BytesOut = int64(n)
			s.record(Record{NetworkEvent: ev})
			continue
		}
		// Logged before the answer leaves, as a refusal is (onTCP).
		ev := eventOf("dns", qtype, "", name, 53, 0, action, reason)
		ev.BytesOut, ev.BytesIn = int64(n), int64(len(reply))
		s.record(Record{NetworkEvent: ev})
		c.Write(reply)
	}
}

// serveDNSTCP answers DNS over TCP (two-byte length prefix per message), as
// resolvers use for large answers or with "options use-vc".
func (s *Sim) serveDNSTCP(ctx context.Context, c net.Conn, f flow) {
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	// A connection that ends without one whole DNS message is on record
	// too: port 53 is no way to send unseen.
	answered, sent := false, int64(0)
	defer func() {
		if !answered && ctx.Err() == nil {
			ev := eventOf("tcp", "", "", f.host(), f.port, 0, ActionBlocked, "not a DNS message: connection closed")
			ev.BytesOut = sent
			s.record(Record{NetworkEvent: ev})
		}
	}()
	var lenBuf [2]byte
	buf := make([]byte, 65535)
	for {
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		k, err := io.ReadFull(c, lenBuf[:])
		sent += int64(k)
		if err != nil {
			return
		}
		n := int(lenBuf[0])<<8 | int(lenBuf[1])
		k, err = io.ReadFull(c, buf[:n])
		sent += int64(k)
		if err != nil {
			return
		}
		reply, name, qtype, action, reason, ok := s.dnsAnswer(buf[:n])
		if !ok {
			answered = false // garbage after queries is on record as well
			return
		}
		answered = true
		ev := eventOf("dns", qtype, "", name, 53, 0, action, reason+" (over TCP)")
		ev.BytesOut, ev.BytesIn = int64(n), int64(len(reply))
		s.record(Record{NetworkEvent: ev})
		c.Write(append([]byte{byte(len(reply) >> 8), byte(len(reply))}, reply...))
	}
}

// relayUDP forwards an allowed UDP flow for real until it goes quiet.
func (s *Sim) relayUDP(ctx context.Context, c *gonet.UDPConn, f flow) {
	defer c.Close()
	d := s.decide(ctx, f, "", "")
	if !d.allowed {
		s.record(Record{NetworkEvent: eventOf("udp", "", "", f.host(), f.port, 0, ActionBlocked, d.reason)})
		return
	}
	up, err := (&net.Dialer{}).DialContext(ctx, "udp", netip.AddrPortFrom(d.dial, uint16(f.port)).String())
	if err != nil {
		s.record(Record{NetworkEvent: eventOf("udp", "", "", f.host(), f.port, 0, ActionBlocked, "dialing: "+err.Error())})
		return
	}
	defer up.Close()
	stop := context.AfterFunc(ctx, func() { up.Close(); c.Close() })
	defer stop()
	var in, out int64
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 65536)
		for {
			up.SetReadDeadline(time.Now().Add(30 * time.Second))
			n, err := up.Read(buf)
			if err != nil {
				c.Close()
				return
			}
			mu.Lock()
			in += int64(n)
			mu.Unlock()
			c.Write(buf[:n])
		}
	}()
	buf := make([]byte, 65536)
	for {
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		n, err := c.Read(buf)
		if err != nil {
			break
		}
		mu.Lock()
		out += int64(n)
		mu.Unlock()
		up.Write(buf[:n])
	}
	up.Close()
	<-done
	ev := eventOf("udp", "", "", f.host(), f.port, 0, ActionAllowed, d.reason)
	ev.BytesIn, ev.BytesOut = in, out
	s.record(Record{NetworkEvent: ev})
}

// synSet holds the connection attempts taken by the stack but not yet by a
// handler. gVisor's TCP forwarder hands each new SYN to a goroutine of its
// own, started inside the packet's delivery but run whenever the scheduler
// gets to it: a sandbox that connects and exits at once (its SYN drained
// from the device as netsim stops) would have that goroutine log the
// attempt after Serve declared the log complete, and the delta would miss
// it (6 trials in 100 did, in a loaded VM). So each SYN is noted, and counts
// as work, while its packet is delivered; its handler takes the note, or
// Serve logs what is left when it stops.
type synSet struct {
	mu    sync.Mutex
	ids   map[stack.TransportEndpointID]struct{}
	ended bool // endSYNs ran: what is noted no more is logged
}

// noteSYN notes pkt when it opens a connection (SYN without ACK) to id not
// already noted. The forwarder ignores a SYN for an id it is still handling;
// such a duplicate noted anyway (its handler took the first note already)
// is logged at the end as one more attempt.
func (s *Sim) noteSYN(id stack.TransportEndpointID, pkt *stack.PacketBuffer) {
	h := header.TCP(pkt.TransportHeader().Slice())
	if len(h) < header.TCPMinimumSize || !h.Flags().Contains(header.TCPFlagSyn) || h.Flags().Contains(header.TCPFlagAck) {
		return
	}
	s.syns.mu.Lock()
	defer s.syns.mu.Unlock()
	if s.syns.ended {
		return
	}
	if _, ok := s.syns.ids[id]; ok || !s.work.add() {
		return
	}
	if s.syns.ids == nil {
		s.syns.ids = map[stack.TransportEndpointID]struct{}{}
	}
	s.syns.ids[id] = struct{}{}
}

// take removes id's note: noted says there was one (its unit of work is
// now the caller's), logged that endSYNs has logged the attempt already.
func (t *synSet) take(id stack.TransportEndpointID) (noted, logged bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.ids[id]; ok {
		delete(t.ids, id)
		return true, false
	}
	return false, t.ended
}

// endSYNs logs every attempt no handler took, as blocked: the sandbox had
// ended (or, in mode none, would have been refused anyway).
func (s *Sim) endSYNs() {
	s.syns.mu.Lock()
	ids := s.syns.ids
	s.syns.ids, s.syns.ended = nil, true
	s.syns.mu.Unlock()
	reason := "the sandbox ended before netsim took the connection"
	if s.mode == "none" {
		reason = "network mode none"
	}
	for id := range ids {
		f := s.flowOf(id.LocalAddress, id.LocalPort, "tcp")
		s.record(Record{NetworkEvent: eventOf("tcp", "", "", f.host(), f.port, 0, ActionBlocked, reason)})
		s.work.done()
	}
}
