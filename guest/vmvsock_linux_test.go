package guest

import (
	"testing"

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
