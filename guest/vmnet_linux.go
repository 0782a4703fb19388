package guest

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/dryexec/dryexec/netsim/tun"
)

// virtioNetID is a network device's id on the virtio bus (the virtio spec's
// device type 1), as sysfs shows it.
const virtioNetID = "0x0001"

// vmNetUp configures the VM's NIC when the host wired one (the vm rung's
// netsim: a virtio-net device with tun.GuestMAC whose frames QEMU sends to
// netsim) as the ns guest configures its TUN device: addresses, default
// routes, no neighbour resolution (tun.ConfigureEthernet). A VM without a
// NIC (the boot probe) has nothing to configure. The interface appears when
// virtio_net has probed the device, which is looked for until wait has
// passed: an init without udev has no event to wait on.
func vmNetUp(wait time.Duration) error {
	if !vmHasNIC() {
		return nil
	}
	mac, err := net.ParseMAC(tun.GuestMAC)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(wait)
	for {
		ifs, err := net.Interfaces()
		if err != nil {
			return fmt.Errorf("listing the VM's interfaces: %w", err)
		}
		for _, i := range ifs {
			if i.HardwareAddr.String() == mac.String() {
				// The name ns gives its TUN device: a command sees the
				// same interfaces on both rungs (the conformance corpus
				// checks it).
				if err := tun.Rename(i.Name, tun.DeviceName); err != nil {
					return err
				}
				return tun.ConfigureEthernet(tun.DeviceName)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no interface with address %s after %v", tun.GuestMAC, wait)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// vmHasNIC says whether the VM has a virtio network device.
func vmHasNIC() bool {
	ids, _ := filepath.Glob("/sys/bus/virtio/devices/*/device")
	for _, p := range ids {
		if b, err := os.ReadFile(p); err == nil && strings.TrimSpace(string(b)) == virtioNetID {
			return true
		}
	}
	return false
}
