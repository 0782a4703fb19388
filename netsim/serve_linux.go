package netsim

import (
	"context"
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// tunLink reads and writes one packet per call on a TUN file.
type tunLink struct{ f *os.File }

func (t tunLink) Read(p []byte) (int, error) {
	for {
		n, err := t.f.Read(p)
		// A TUN read can fail transiently when the device is torn down
		// and recreated; only EBADFD and closure end the loop.
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.EAGAIN) {
			continue
		}
		return n, err
	}
}
func (t tunLink) Write(p []byte) (int, error) { return t.f.Write(p) }
func (t tunLink) Close() error                { return t.f.Close() }

// ServeTUN serves the TUN device tun (from SetupTUN, received from the
// sandbox) until ctx is done. It takes ownership of tun. Cancel ctx when the
// sandbox ends: the open TUN file holds a reference to the sandbox's network
// namespace, so the device does not go away by itself while it is served.
func (s *Sim) ServeTUN(ctx context.Context, tun *os.File) error {
	// The file must be non-blocking for Close (on ctx done) to interrupt a
	// pending Read: re-wrap it so the runtime poller owns it.
	raw, err := tun.SyscallConn()
	if err != nil {
		tun.Close()
		return err
	}
	var dup int
	var cerr error
	raw.Control(func(fd uintptr) {
		dup, cerr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0)
		if cerr == nil {
			cerr = unix.SetNonblock(dup, true)
		}
	})
	tun.Close()
	if cerr != nil {
		return fmt.Errorf("netsim: preparing TUN fd: %w", cerr)
	}
	return s.Serve(ctx, tunLink{os.NewFile(uintptr(dup), "tun")})
}
