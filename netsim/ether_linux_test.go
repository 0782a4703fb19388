package netsim_test

import (
	"fmt"
	"net"
	"os"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/netsim"
	"github.com/dryexec/dryexec/netsim/tun"
)

// setupTAP makes TAP device name (one Ethernet frame per read and write, as
// a VM's virtio-net carries them to QEMU's socket backend) with
// tun.GuestMAC, and configures it as the vm rung's guest configures the
// VM's NIC (tun.ConfigureEthernet).
func setupTAP(name string) (*os.File, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	ifr.SetUint16(unix.IFF_TAP | unix.IFF_NO_PI)
	if err := unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("creating TAP %s: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), "tap")
	mac, err := net.ParseMAC(tun.GuestMAC)
	if err != nil {
		f.Close()
		return nil, err
	}
	// struct ifreq: the name, then a sockaddr (family ARPHRD_ETHER, the
	// address in sa_data).
	var req [40]byte
	copy(req[:], name)
	*(*uint16)(unsafe.Pointer(&req[unix.IFNAMSIZ])) = unix.ARPHRD_ETHER
	copy(req[unix.IFNAMSIZ+2:], mac)
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCSIFHWADDR, uintptr(unsafe.Pointer(&req[0]))); e != 0 {
		f.Close()
		return nil, fmt.Errorf("setting the address of %s: %w", name, e)
	}
	if err := tun.ConfigureEthernet(name); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// TestServeEthernet: over a link of Ethernet frames (a real TAP device
// standing in for a VM's virtio-net), configured as the vm rung's guest
// configures its NIC, real clients reach netsim as over a TUN device: DNS,
// HTTP and HTTPS mocks, a literal address; each attempt is logged.
func TestServeEthernet(t *testing.T) {
	for _, tc := range []struct {
		name    string
		argv    []string
		env     []string
		wantOut string
		wantURL string
	}{
		{"curl http", []string{"curl", "-sS", "-m", "10", "-w", " %{http_code}", "http://api.example.com/users/7"}, nil, `{"name":"ada"} 200`, "http://api.example.com/users/7"},
		{"curl https", []string{"curl", "-sS", "-m", "10", "-w", " %{http_code}", "https://secure.example.com/v1/x"}, trustEnv, "secure-ok 201", "https://secure.example.com/v1/x"},
		{"python raw socket to a literal address", []string{"/usr/bin/python3", "-c", pyRaw}, nil, "202 raw-ok", "http://203.0.113.7/raw"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sim := newSim(t, netsim.Config{}, map[string]string{"mocks.yaml": mockFile})
			res := runSandbox(t, sim, sandboxOpts{env: tc.env, ethernet: true}, tc.argv...)
			if res.code != 0 || !strings.Contains(res.stdout, tc.wantOut) {
				t.Fatalf("exit %d, stdout %q (want %q), stderr %s\nlog: %s", res.code, res.stdout, tc.wantOut, res.stderr, dumpLog(t, sim.Log()))
			}
			if _, ok := findEvent(sim.Log(), dryexec.NetworkEvent{URL: tc.wantURL, Action: netsim.ActionMocked}); !ok {
				t.Errorf("no mocked event for %s in %s", tc.wantURL, dumpLog(t, sim.Log()))
			}
		})
	}
}

// pySlow connects, stays silent for 3 s (a client in a VM under TCG, loading
// its CA bundle before its ClientHello), then asks for a mocked URL.
const pySlow = `import socket, time
s = socket.create_connection(("api.example.com", 80), timeout=20)
time.sleep(3)
try:
    s.sendall(b"GET /health HTTP/1.1\r\nHost: api.example.com\r\nConnection: close\r\n\r\n")
    print(s.recv(4096).split(b" ")[1].decode())
except OSError as e:
    print("reset", e.errno)
`

// TestSniffTimeout: a client that connects and stays silent longer than
// netsim's sniff wait is taken for a server-speaks-first protocol and reset;
// Config.SniffTimeout (what the vm rung sets for its slow clients) lets it
// speak late and be answered.
func TestSniffTimeout(t *testing.T) {
	for _, tc := range []struct {
		name    string
		timeout time.Duration
		want    string
	}{
		{"default", 0, "reset"},
		{"longer", 10 * time.Second, "204"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			sim := newSim(t, netsim.Config{SniffTimeout: tc.timeout}, map[string]string{"mocks.yaml": mockFile})
			res := runSandbox(t, sim, sandboxOpts{ethernet: true}, "/usr/bin/python3", "-c", pySlow)
			if !strings.HasPrefix(res.stdout, tc.want) {
				t.Fatalf("stdout %q, want %q; stderr %s\nlog: %s", res.stdout, tc.want, res.stderr, dumpLog(t, sim.Log()))
			}
		})
	}
}
