// Package tun owns the sandbox's side of netsim's link: the TUN device the
// guest creates inside the sandbox's network namespace (addresses, MTU,
// default routes), the hand-over of its file descriptor to the host, and the
// resolv.conf and trust-store path the guest binds. It is small on purpose:
// the guest imports it, not the netstack.
package tun

import "net/netip"

// The sandbox's side of the link, as SetupTUN configures it. The gateway is
// also the resolver ResolvConf names; netsim answers DNS sent to any address.
var (
	GuestAddr4   = netip.MustParseAddr("10.199.0.2")
	GatewayAddr4 = netip.MustParseAddr("10.199.0.1")
	GuestAddr6   = netip.MustParseAddr("fd00:d7e::2")
	GatewayAddr6 = netip.MustParseAddr("fd00:d7e::1")
)

// MTU of the link, on both sides.
const MTU = 1500

// DeviceName is the sandbox's network interface on every rung: the ns
// sandbox's TUN device, and the VM's NIC once renamed (Rename).
const DeviceName = "dx0"

// The Ethernet addresses of a link that carries frames (a VM's virtio-net):
// the VM's interface has GuestMAC (QEMU's -device …,mac=), and netsim
// answers from GatewayMAC. Both are locally administered unicast addresses.
// The guest's interface resolves no neighbours (ConfigureEthernet sets
// IFF_NOARP): every destination is netsim, as on a TUN device.
const (
	GuestMAC   = "02:d7:e0:00:00:02"
	GatewayMAC = "02:d7:e0:00:00:01"
)

// SystemBundle is where Debian, Ubuntu, Alpine and Arch keep the system trust
// store; the guest binds netsim's bundle (system roots + the CA) over it.
const SystemBundle = "/etc/ssl/certs/ca-certificates.crt"

// ResolvConf is the resolv.conf the sandbox needs (the guest binds it over
// /etc/resolv.conf): host resolvers on loopback (systemd-resolved's
// 127.0.0.53) would otherwise stay inside the sandbox's own lo.
func ResolvConf() []byte {
	return []byte("# dryexec netsim: DNS is answered by the host side of the sandbox\nnameserver " + GatewayAddr4.String() + "\noptions edns0 attempts:2 timeout:2\n")
}
