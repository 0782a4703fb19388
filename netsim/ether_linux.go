package netsim

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync"

	"github.com/dryexec/dryexec/netsim/tun"
)

// Ethernet framing (no VLAN tags: the VMM's NIC adds none).
const (
	etherHeader = 14
	etherIPv4   = 0x0800
	etherIPv6   = 0x86DD
)

// etherLink carries netsim's raw IP packets over a link of Ethernet frames,
// one frame per Read and Write of frames (a VM's virtio-net, through QEMU's
// datagram socket backend): it strips the header of what the sandbox sends
// and puts one on what netsim answers (from tun.GatewayMAC to
// tun.GuestMAC). Neighbour resolution is off on the sandbox's side
// (tun.ConfigureEthernet), as it is on a TUN device: every destination is
// netsim, so there is nothing to resolve, and frames other than IPv4 and
// IPv6 (ARP, LLDP) are dropped unread.
type etherLink struct {
	frames io.ReadWriteCloser
	rbuf   []byte // only Serve's single reader uses it

	// mu guards wbuf: the stack writes from several goroutines, and one
	// packet must be one frame.
	mu   sync.Mutex
	wbuf []byte
}

func newEtherLink(frames io.ReadWriteCloser) (*etherLink, error) {
	guest, err := net.ParseMAC(tun.GuestMAC)
	if err != nil {
		return nil, err
	}
	gw, err := net.ParseMAC(tun.GatewayMAC)
	if err != nil {
		return nil, err
	}
	l := &etherLink{frames: frames, rbuf: make([]byte, etherHeader+65536), wbuf: make([]byte, etherHeader, etherHeader+tun.MTU)}
	copy(l.wbuf[0:6], guest)
	copy(l.wbuf[6:12], gw)
	return l, nil
}

// Read returns the next IP packet the sandbox sent.
func (l *etherLink) Read(p []byte) (int, error) {
	for {
		n, err := l.frames.Read(l.rbuf)
		if err != nil {
			return 0, err
		}
		if n <= etherHeader {
			continue
		}
		switch binary.BigEndian.Uint16(l.rbuf[12:14]) {
		case etherIPv4, etherIPv6:
			return copy(p, l.rbuf[etherHeader:n]), nil
		}
	}
}

// Write sends one IP packet to the sandbox as one frame.
func (l *etherLink) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	typ := uint16(etherIPv4)
	switch p[0] >> 4 {
	case 4:
	case 6:
		typ = etherIPv6
	default:
		return 0, fmt.Errorf("netsim: not an IP packet (version %d)", p[0]>>4)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	binary.BigEndian.PutUint16(l.wbuf[12:14], typ)
	l.wbuf = append(l.wbuf[:etherHeader], p...)
	if _, err := l.frames.Write(l.wbuf); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Close closes the frame link (which drains what is queued, as a TUN link
// does).
func (l *etherLink) Close() error { return l.frames.Close() }
