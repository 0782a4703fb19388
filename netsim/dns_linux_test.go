package netsim_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/netsim"
)

const pyDNS = `import socket
def a(n):
    return sorted({i[4][0] for i in socket.getaddrinfo(n, 80, socket.AF_INET)})
def aaaa(n):
    try:
        return sorted({i[4][0] for i in socket.getaddrinfo(n, 80, socket.AF_INET6)})
    except socket.gaierror:
        return "none"
print(a("one.example.com"), a("two.example.com"), a("ONE.example.com."), aaaa("one.example.com"))
`

const pyDNSTCP = `import socket, struct
q = struct.pack("!HHHHHH", 7, 0x0100, 1, 0, 0, 0) + b"".join(bytes([len(l)]) + l for l in [b"tcp", b"example", b"com"]) + b"\0" + struct.pack("!HH", 1, 1)
s = socket.create_connection(("10.199.0.1", 53), timeout=5)
s.sendall(struct.pack("!H", len(q)) + q)
n = struct.unpack("!H", s.recv(2))[0]
r = b""
while len(r) < n:
    r += s.recv(n - len(r))
print(struct.unpack("!H", r[:2])[0], socket.inet_ntoa(r[-4:]))
`

// TestDNSOverTCP: DNS over TCP is answered too.
func TestDNSOverTCP(t *testing.T) {
	sim := newSim(t, netsim.Config{}, map[string]string{"mocks.yaml": mockFile})
	res := runSandbox(t, sim, sandboxOpts{}, "/usr/bin/python3", "-c", pyDNSTCP)
	if strings.TrimSpace(res.stdout) != "7 198.18.0.1" {
		t.Fatalf("got %q; stderr %s; log %s", res.stdout, res.stderr, dumpLog(t, sim.Log()))
	}
	if _, ok := findEvent(sim.Log(), dryexec.NetworkEvent{Proto: "dns", Method: "A", Host: "tcp.example.com"}); !ok {
		t.Errorf("no event: %s", dumpLog(t, sim.Log()))
	}
}

// TestDNS: names get stable synthetic addresses (one per name, case and
// trailing dot ignored), AAAA gets no answer, and each query is logged.
func TestDNS(t *testing.T) {
	sim := newSim(t, netsim.Config{}, map[string]string{"mocks.yaml": mockFile})
	res := runSandbox(t, sim, sandboxOpts{}, "/usr/bin/python3", "-c", pyDNS)
	want := "['198.18.0.1'] ['198.18.0.2'] ['198.18.0.1'] none"
	if strings.TrimSpace(res.stdout) != want {
		t.Fatalf("got %q want %q; stderr %s; log %s", res.stdout, want, res.stderr, dumpLog(t, sim.Log()))
	}
	for _, w := range []dryexec.NetworkEvent{
		{Proto: "dns", Method: "A", Host: "one.example.com", Action: netsim.ActionMocked},
		{Proto: "dns", Method: "A", Host: "two.example.com", Action: netsim.ActionMocked},
		{Proto: "dns", Method: "AAAA", Host: "one.example.com", Action: netsim.ActionMocked},
	} {
		if _, ok := findEvent(sim.Log(), w); !ok {
			t.Errorf("no event like %+v in %s", w, dumpLog(t, sim.Log()))
		}
	}
}

// TestNotDNSOnRecord: whatever the sandbox sends to port 53 is on record,
// DNS or not. A datagram that was not a query, and a TCP connection that
// carried no whole DNS message, were dropped without an event: a way to send
// (in every mode, to any address) that the log did not show.
func TestNotDNSOnRecord(t *testing.T) {
	sim := newSim(t, netsim.Config{}, map[string]string{"mocks.yaml": mockFile})
	res := runSandbox(t, sim, sandboxOpts{}, "/usr/bin/python3", "-c", `import socket
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.sendto(b"not dns, 27 bytes of data!!", ("192.0.2.53", 53))
u.sendto(b"\x12\x34\x01\x00\x00\x01" + b"A" * 3000, ("192.0.2.53", 53))
t = socket.create_connection(("10.199.0.1", 53), timeout=5)
t.sendall(b"\x00\x05hello")
t.recv(10)
t2 = socket.create_connection(("10.199.0.1", 53), timeout=5)
t2.sendall(b"hello")
t2.shutdown(socket.SHUT_WR)
t2.recv(10)
print("sent")
`)
	if strings.TrimSpace(res.stdout) != "sent" {
		t.Fatalf("got %q; stderr %s", res.stdout, res.stderr)
	}
	for _, w := range []dryexec.NetworkEvent{
		{Proto: "udp", Host: "192.0.2.53", Port: 53, Action: netsim.ActionBlocked, BytesOut: 27},
		{Proto: "udp", Host: "192.0.2.53", Port: 53, Action: netsim.ActionBlocked, BytesOut: 3006},
		{Proto: "tcp", Port: 53, Action: netsim.ActionBlocked, BytesOut: 7},
		{Proto: "tcp", Port: 53, Action: netsim.ActionBlocked, BytesOut: 5},
	} {
		if !slices.ContainsFunc(sim.Log(), func(e dryexec.NetworkEvent) bool {
			return e.Proto == w.Proto && (w.Host == "" || e.Host == w.Host) && e.Port == w.Port &&
				e.Action == w.Action && e.BytesOut == w.BytesOut
		}) {
			t.Errorf("no event like %+v in %s", w, dumpLog(t, sim.Log()))
		}
	}
}
