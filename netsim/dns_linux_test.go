package netsim_test

import (
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
