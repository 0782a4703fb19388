package guest

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/wire"
)

// The guest's AF_VSOCK listeners cannot run on a host without a vsock
// transport (no /dev/vhost-vsock, no vsock loopback here); what decides
// that they are used is the kernel's command line, tested here.
func TestVMWireOnVsock(t *testing.T) {
	for _, tc := range []struct {
		cmdline string
		want    bool
	}{
		{"console=ttyS0 reboot=k pci=off " + wire.VMVsockParam + " rdinit=/init -- guest vm-init\n", true},
		{wire.VMVsockParam, true},
		{"console=ttyS0 reboot=t rdinit=/init -- guest vm-init\n", false},
		{"x" + wire.VMVsockParam + " y", false},
		{wire.VMVsockParam + "x", false},
		{"dryexec.wire=serial", false},
	} {
		if got := vmWireOnVsock(tc.cmdline); got != tc.want {
			t.Errorf("vmWireOnVsock(%q) = %v, want %v", tc.cmdline, got, tc.want)
		}
	}
}

// A session whose wire runs over vsock (Firecracker) refuses to park, and
// stays as it was: a Firecracker snapshot resets vsock streams, which this
// guest does not reconnect, so the resume would lose the session. The
// decision rests on the wire's socket family, tried on a real AF_VSOCK
// socket (creating one needs no transport) and on the socketpair the other
// rungs' wires are.
func TestParkRefusedOverVsock(t *testing.T) {
	vs, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	testreq.Needf(t, testreq.Kernel, "an AF_VSOCK socket", err)
	defer unix.Close(vs)
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(pair[0])
	defer unix.Close(pair[1])
	if !onVsock(vs) || onVsock(pair[0]) {
		t.Fatalf("onVsock: vsock socket %v, socketpair %v; want true, false", onVsock(vs), onVsock(pair[0]))
	}
	stopped := false
	s := &session{vm: &vmPark{image: true, vsock: onVsock(vs), alive: func() { stopped = true }}}
	if err := s.parkVM(); !errors.Is(err, errParkVsock) {
		t.Fatalf("parkVM over vsock: %v, want errParkVsock", err)
	}
	if s.vm.parked || stopped {
		t.Errorf("a refused park changed the session: parked %v, heartbeat stopped %v", s.vm.parked, stopped)
	}
	s.vm.vsock = onVsock(pair[0])
	if err := s.parkVM(); err != nil || !s.vm.parked {
		t.Errorf("parkVM over a socketpair: %v, parked %v; want parked", err, s.vm.parked)
	}
}
