package netsim

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// tunLink reads and writes one packet per call on a TUN file (or on a
// datagram socket of Ethernet frames, beneath an etherLink).
type tunLink struct {
	f *os.File
	// reading is held by Read while it waits for a packet, so that Close
	// can tell when the reader has let go of the file.
	reading sync.Mutex
	// closing is set by Close: Read then hands over the packets the device
	// still holds, without waiting for more, and then reports closure.
	closing atomic.Bool
	// ended is closed when Read has reported an error (closure included):
	// the file is not read again.
	ended   chan struct{}
	endOnce sync.Once
}

func (t *tunLink) Read(p []byte) (int, error) {
	t.reading.Lock()
	defer t.reading.Unlock()
	for {
		n, err := t.f.Read(p)
		if errors.Is(err, os.ErrDeadlineExceeded) && t.closing.Load() {
			return t.drain(p)
		}
		// A TUN read can fail transiently when the device is torn down
		// and recreated; only EBADFD and closure end the loop.
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
			continue
		}
		if err != nil {
			t.end()
		}
		return n, err
	}
}

func (t *tunLink) end() { t.endOnce.Do(func() { close(t.ended) }) }

// drain reads one packet still queued on the device, or reports closure
// when there is none. Why: the sandbox's last packets (a connect attempt by
// a process that then exited) are queued before Close is called, and the
// log must hold them; the poller refuses reads past the deadline, so this
// reads the non-blocking fd directly.
func (t *tunLink) drain(p []byte) (int, error) {
	raw, err := t.f.SyscallConn()
	if err != nil {
		return 0, net.ErrClosed
	}
	var n int
	var rerr error
	if err := raw.Control(func(fd uintptr) {
		for {
			n, rerr = unix.Read(int(fd), p)
			if rerr != unix.EINTR {
				return
			}
		}
	}); err != nil || rerr != nil || n <= 0 {
		t.end()
		return 0, net.ErrClosed
	}
	return n, nil
}

func (t *tunLink) Write(p []byte) (int, error) { return t.f.Write(p) }

// Close wakes a pending Read at once (a deadline in the past; Read then
// drains what is queued) and closes the file in the background once the
// reader has reported closure and let go of the file (or after a second, for
// a reader that stopped reading). Closing a TUN file
// detaches its queue and unregisters the device, which waits for RCU grace
// periods: 15-25 ms in a nested VM, the largest single cost of a trial's
// teardown, and nothing Serve's caller needs to wait for (no packet is read
// or written after Serve returns; the sandbox's network namespace goes when
// the file does). Were the reader still inside Read when the file is closed,
// it would hold the last reference and make that close itself, synchronously.
func (t *tunLink) Close() error {
	t.closing.Store(true)
	t.f.SetReadDeadline(time.Unix(1, 0))
	go func() {
		select {
		case <-t.ended:
		case <-time.After(time.Second):
		}
		t.reading.Lock()
		defer t.reading.Unlock()
		t.f.Close()
	}()
	return nil
}

// ServeTUN serves the TUN device tun (from SetupTUN, received from the
// sandbox) until ctx is done. It takes ownership of tun. Cancel ctx when the
// sandbox ends: the open TUN file holds a reference to the sandbox's network
// namespace, so the device does not go away by itself while it is served.
func (s *Sim) ServeTUN(ctx context.Context, tun *os.File) error {
	l, err := packetLink(tun)
	if err != nil {
		return err
	}
	return s.Serve(ctx, l)
}

// ServeEthernet serves a link of Ethernet frames, one per read and write of
// frames (a datagram socket whose other end is a VM's NIC: QEMU's -netdev
// dgram), until ctx is done. It takes ownership of frames. The sandbox's
// interface must have GuestMAC and resolve no neighbours
// (tun.ConfigureEthernet).
func (s *Sim) ServeEthernet(ctx context.Context, frames *os.File) error {
	l, err := packetLink(frames)
	if err != nil {
		return err
	}
	el, err := newEtherLink(l)
	if err != nil {
		l.Close()
		return err
	}
	return s.Serve(ctx, el)
}

// packetLink makes f, a file that reads and writes one packet per call, a
// link Serve can close while a Read waits: the file must be non-blocking for
// that, so it is re-wrapped for the runtime poller to own. It takes
// ownership of f.
func packetLink(f *os.File) (*tunLink, error) {
	raw, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	var dup int
	var cerr error
	raw.Control(func(fd uintptr) {
		dup, cerr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
		if cerr == nil {
			cerr = unix.SetNonblock(dup, true)
		}
	})
	f.Close()
	if cerr != nil {
		return nil, fmt.Errorf("netsim: preparing the link's fd: %w", cerr)
	}
	return &tunLink{f: os.NewFile(uintptr(dup), f.Name()), ended: make(chan struct{})}, nil
}
