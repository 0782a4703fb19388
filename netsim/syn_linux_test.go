package netsim

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"gvisor.dev/gvisor/pkg/tcpip"
	"gvisor.dev/gvisor/pkg/tcpip/header"
)

// synPacket is an IPv4 TCP SYN from 10.0.0.2:sport to dst:80, checksums
// and all, as a sandbox's kernel would write it to the TUN device.
func synPacket(dst [4]byte, sport uint16) []byte {
	const ipLen, tcpLen = header.IPv4MinimumSize, header.TCPMinimumSize
	b := make([]byte, ipLen+tcpLen)
	src, to := tcpip.AddrFrom4([4]byte{10, 0, 0, 2}), tcpip.AddrFrom4(dst)
	ip := header.IPv4(b)
	ip.Encode(&header.IPv4Fields{TotalLength: ipLen + tcpLen, TTL: 64, Protocol: uint8(header.TCPProtocolNumber), SrcAddr: src, DstAddr: to})
	ip.SetChecksum(^ip.CalculateChecksum())
	tcp := header.TCP(b[ipLen:])
	tcp.Encode(&header.TCPFields{SrcPort: sport, DstPort: 80, SeqNum: 1, DataOffset: tcpLen, Flags: header.TCPFlagSyn, WindowSize: 65535})
	xsum := header.PseudoHeaderChecksum(header.TCPProtocolNumber, src, to, tcpLen)
	tcp.SetChecksum(^tcp.CalculateChecksum(xsum))
	return b
}

// TestSYNLoggedAtStop: connection attempts still queued on the device when
// netsim stops (a sandbox that connects and exits at once) are all in the
// log once Quiet says it is complete. gVisor's forwarder handles each SYN
// in a goroutine of its own that may run only after Serve has wound down;
// before noteSYN, a trial lost such an attempt 6 times in 100 on a loaded
// VM, and this test (20 attempts, 30 times) lost some nearly every run.
func TestSYNLoggedAtStop(t *testing.T) {
	const attempts, runs = 20, 30
	for run := range runs {
		s, err := New(context.Background(), Config{CADir: t.TempDir()})
		if err != nil {
			t.Fatal(err)
		}
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		for i := range attempts {
			if _, err := unix.Write(fds[1], synPacket([4]byte{10, 9, 8, byte(i + 1)}, uint16(40000+i))); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithCancel(context.Background())
		link := &tunLink{f: os.NewFile(uintptr(fds[0]), "tun"), ended: make(chan struct{})}
		served := make(chan error, 1)
		go func() { served <- s.Serve(ctx, link) }()
		// Stopped at once, as a trial stops it when its sandbox is gone:
		// the queued packets are drained, then the log is final.
		cancel()
		select {
		case <-s.Quiet():
		case <-time.After(10 * time.Second):
			t.Fatal("netsim not quiet after 10s")
		}
		got := map[string]bool{}
		for _, e := range s.Log() {
			got[e.Host] = true
		}
		for i := range attempts {
			if h := fmt.Sprintf("10.9.8.%d", i+1); !got[h] {
				t.Fatalf("run %d: the attempt to %s is not in the log (%d of %d are)", run, h, len(got), attempts)
			}
		}
		if err := <-served; err != nil {
			t.Fatal(err)
		}
		unix.Close(fds[1])
	}
}
