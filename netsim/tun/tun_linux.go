package tun

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// SetupTUN runs on the sandbox's side, inside its network namespace (it
// needs CAP_NET_ADMIN there, which the namespace's owner has, rootless too):
// it creates TUN device name, gives it GuestAddr4/24 and GuestAddr6/64, sets
// it up with MTU, and routes everything (IPv4 and IPv6 default routes)
// through it. The returned file is the device; pass it to the host side (see
// SendFD) for ServeTUN. The caller should also bind ResolvConf over
// /etc/resolv.conf. IPv6 set-up is best effort (a namespace may have it
// disabled); IPv4 failures are errors.
func SetupTUN(name string) (*os.File, error) {
	if name == "" || len(name) >= unix.IFNAMSIZ {
		return nil, fmt.Errorf("tun: bad TUN name %q", name)
	}
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("tun: opening /dev/net/tun: %w", err)
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("tun: creating TUN %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), "/dev/net/tun:"+name)
	if err := configureLink(name); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// SetPersist makes the TUN device dev is attached to persistent (on) or not.
// A device that is not persistent is unregistered when its last descriptor
// closes, synchronously, in the closing process: a few RCU grace periods,
// measured at 11–20 ms on a loaded 2-CPU VM, which a sandbox's PID 1
// holding the device then spends in its exit. A persistent device outlives
// its descriptors and goes with its network namespace, which the kernel
// tears down in the background once nothing holds it.
func SetPersist(dev *os.File, on bool) error {
	v := 0
	if on {
		v = 1
	}
	if err := unix.IoctlSetInt(int(dev.Fd()), unix.TUNSETPERSIST, v); err != nil {
		return fmt.Errorf("tun: setting persist=%v: %w", on, err)
	}
	return nil
}

// ConfigureEthernet runs inside the sandbox on an Ethernet interface whose
// other end netsim serves (a VM's virtio-net, wired by the VMM to netsim's
// frame socket): it turns neighbour resolution off (IFF_NOARP: frames go to
// netsim whatever their destination, and netsim answers no ARP or neighbour
// solicitation), then configures it as SetupTUN does its device: MTU, up,
// GuestAddr4/24 and GuestAddr6/64, default routes through it.
func ConfigureEthernet(name string) error {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("tun: socket: %w", err)
	}
	defer unix.Close(s)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("tun: reading flags of %s: %w", name, err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_NOARP)
	if err := unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("tun: turning ARP off on %s: %w", name, err)
	}
	return configureLink(name)
}

// Rename gives the interface name the name to: the VM's NIC is called what
// the ns sandbox's TUN device is (DeviceName), so that a command sees the
// same network whichever rung runs it. The interface must be down (a NIC
// the kernel has just probed is).
func Rename(name, to string) error {
	if len(name) >= unix.IFNAMSIZ || len(to) >= unix.IFNAMSIZ {
		return fmt.Errorf("tun: renaming %q to %q: a name has at most %d bytes", name, to, unix.IFNAMSIZ-1)
	}
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("tun: socket: %w", err)
	}
	defer unix.Close(s)
	// struct ifreq: the name, then ifr_newname in the union.
	var req [40]byte
	copy(req[:], name)
	copy(req[unix.IFNAMSIZ:], to)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(s), unix.SIOCSIFNAME, uintptr(unsafe.Pointer(&req[0]))); e != 0 {
		return fmt.Errorf("tun: renaming %s to %s: %w", name, to, e)
	}
	return nil
}

// CheckTUN reports whether this process can open /dev/net/tun, which
// SetupTUN needs inside the sandbox (for `dryexec doctor`). Rootless, the
// node must be mode 0666, as distributions ship it.
func CheckTUN() error {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("tun: opening /dev/net/tun: %w", err)
	}
	return unix.Close(fd)
}

func configureLink(name string) error {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("tun: socket: %w", err)
	}
	defer unix.Close(s)
	ifr, _ := unix.NewIfreq(name)
	ifr.SetUint32(MTU)
	if err := unix.IoctlIfreq(s, unix.SIOCSIFMTU, ifr); err != nil {
		return fmt.Errorf("tun: setting MTU of %s: %w", name, err)
	}
	ifr, _ = unix.NewIfreq(name)
	if err := unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("tun: reading flags of %s: %w", name, err)
	}
	// No router solicitations: netsim is no router and drops them unlogged,
	// and the one the kernel sends as the link comes up would wake a lazily
	// started netsim for a trial that sends nothing (wire.TrialStart.NetLazy).
	// Best effort: a kernel without IPv6 has no such setting.
	os.WriteFile("/proc/sys/net/ipv6/conf/"+name+"/router_solicitations", []byte("0"), 0)
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("tun: setting %s up: %w", name, err)
	}
	ifr, _ = unix.NewIfreq(name)
	if err := unix.IoctlIfreq(s, unix.SIOCGIFINDEX, ifr); err != nil {
		return fmt.Errorf("tun: index of %s: %w", name, err)
	}
	index := ifr.Uint32()

	nl, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return fmt.Errorf("tun: netlink: %w", err)
	}
	defer unix.Close(nl)
	if err := unix.Bind(nl, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("tun: netlink bind: %w", err)
	}
	if err := addAddr(nl, index, GuestAddr4, 24); err != nil {
		return fmt.Errorf("tun: address %s on %s: %w", GuestAddr4, name, err)
	}
	if err := addDefaultRoute(nl, index, unix.AF_INET); err != nil {
		return fmt.Errorf("tun: default route via %s: %w", name, err)
	}
	if addAddr(nl, index, GuestAddr6, 64) == nil {
		addDefaultRoute(nl, index, unix.AF_INET6)
	}
	return nil
}

// rtattr appends one netlink attribute.
func rtattr(b []byte, typ uint16, data []byte) []byte {
	l := 4 + len(data)
	b = binary.NativeEndian.AppendUint16(b, uint16(l))
	b = binary.NativeEndian.AppendUint16(b, typ)
	b = append(b, data...)
	for len(b)%4 != 0 {
		b = append(b, 0)
	}
	return b
}

func addAddr(nl int, index uint32, a netip.Addr, prefix uint8) error {
	family, flags := uint8(unix.AF_INET), uint8(0)
	if a.Is6() {
		// No duplicate address detection: the address is usable at once.
		family, flags = unix.AF_INET6, unix.IFA_F_NODAD
	}
	body := []byte{family, prefix, flags, unix.RT_SCOPE_UNIVERSE}
	body = binary.NativeEndian.AppendUint32(body, index)
	body = rtattr(body, unix.IFA_LOCAL, a.AsSlice())
	body = rtattr(body, unix.IFA_ADDRESS, a.AsSlice())
	return nlDo(nl, unix.RTM_NEWADDR, unix.NLM_F_CREATE|unix.NLM_F_EXCL, body)
}

func addDefaultRoute(nl int, index uint32, family uint8) error {
	scope := uint8(unix.RT_SCOPE_LINK)
	if family == unix.AF_INET6 {
		scope = unix.RT_SCOPE_UNIVERSE
	}
	body := []byte{family, 0, 0, 0, unix.RT_TABLE_MAIN, unix.RTPROT_BOOT, scope, unix.RTN_UNICAST}
	body = binary.NativeEndian.AppendUint32(body, 0)
	body = rtattr(body, unix.RTA_OIF, binary.NativeEndian.AppendUint32(nil, index))
	return nlDo(nl, unix.RTM_NEWROUTE, unix.NLM_F_CREATE|unix.NLM_F_EXCL, body)
}

// nlDo sends one request and waits for its acknowledgement.
func nlDo(nl int, typ uint16, flags uint16, body []byte) error {
	const seq = 1
	msg := binary.NativeEndian.AppendUint32(nil, uint32(unix.NLMSG_HDRLEN+len(body)))
	msg = binary.NativeEndian.AppendUint16(msg, typ)
	msg = binary.NativeEndian.AppendUint16(msg, flags|unix.NLM_F_REQUEST|unix.NLM_F_ACK)
	msg = binary.NativeEndian.AppendUint32(msg, seq)
	msg = binary.NativeEndian.AppendUint32(msg, 0)
	msg = append(msg, body...)
	if err := unix.Sendto(nl, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return err
	}
	buf := make([]byte, 8192)
	for {
		n, _, err := unix.Recvfrom(nl, buf, 0)
		if err != nil {
			return err
		}
		msgs, err := syscall.ParseNetlinkMessage(buf[:n])
		if err != nil {
			return err
		}
		for _, m := range msgs {
			if m.Header.Seq != seq || m.Header.Type != unix.NLMSG_ERROR {
				continue
			}
			if len(m.Data) < 4 {
				return errors.New("short netlink error")
			}
			if e := int32(binary.NativeEndian.Uint32(m.Data[:4])); e != 0 {
				return unix.Errno(-e)
			}
			return nil
		}
	}
}

// SendFD passes f over a unix socket (SCM_RIGHTS), as the guest hands its
// TUN device to the host.
func SendFD(c *net.UnixConn, f *os.File) error {
	_, _, err := c.WriteMsgUnix([]byte{'T'}, unix.UnixRights(int(f.Fd())), nil)
	return err
}

// RecvFD receives one file sent by SendFD.
func RecvFD(c *net.UnixConn) (*os.File, error) {
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4))
	_, oobn, _, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, err
	}
	msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
	if err != nil {
		return nil, err
	}
	for _, m := range msgs {
		fds, err := unix.ParseUnixRights(&m)
		if err != nil || len(fds) == 0 {
			continue
		}
		for _, extra := range fds[1:] {
			unix.Close(extra)
		}
		unix.CloseOnExec(fds[0])
		return os.NewFile(uintptr(fds[0]), "received-fd"), nil
	}
	return nil, errors.New("tun: no file descriptor received")
}
