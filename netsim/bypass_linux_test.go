package netsim_test

import (
	"bufio"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/netsim"
)

// bannerServer speaks first ("HELLO"), then echoes lines upper-cased: a
// server-speaks-first protocol, as SSH or SMTP are.
func bannerServer(t *testing.T) (port int, conns *atomic.Int64) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	conns = &atomic.Int64{}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			conns.Add(1)
			go func() {
				defer c.Close()
				fmt.Fprintln(c, "HELLO")
				sc := bufio.NewScanner(c)
				for sc.Scan() {
					fmt.Fprintln(c, strings.ToUpper(sc.Text()))
				}
			}()
		}
	}()
	return l.Addr().(*net.TCPAddr).Port, conns
}

const pyBanner = `import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=10)
f = s.makefile("rwb")
banner = f.readline().decode().strip()
f.write(b"ping\n"); f.flush()
print(banner, f.readline().decode().strip())
`

const pyConnect = `import socket, sys
try:
    s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
    s.sendall(b"GET / HTTP/1.0\r\n\r\n")
    print("connected", s.recv(100)[:12])
except Exception as e:
    print("failed", type(e).__name__)
`

const pyUDP = `import socket, sys
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.settimeout(float(sys.argv[3]))
u.sendto(b"ping", (sys.argv[1], int(sys.argv[2])))
try:
    print("reply", u.recvfrom(100)[0].decode())
except Exception as e:
    print("noreply", type(e).__name__)
`

// TestRawTCPAndUDP: allowed non-HTTP traffic (a server-speaks-first TCP
// protocol, a UDP exchange) is forwarded for real and logged; without the
// rule it is blocked and the server sees nothing.
func TestRawTCPAndUDP(t *testing.T) {
	tcpPort, conns := bannerServer(t)
	udpConn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer udpConn.Close()
	var udpSeen atomic.Int64
	go func() {
		buf := make([]byte, 100)
		for {
			n, from, err := udpConn.ReadFrom(buf)
			if err != nil {
				return
			}
			udpSeen.Add(1)
			udpConn.WriteTo([]byte(strings.ToUpper(string(buf[:n]))), from)
		}
	}()
	udpPort := udpConn.LocalAddr().(*net.UDPAddr).Port
	lookup := resolveTo("svc.internal", "127.0.0.1")

	t.Run("tcp allowed", func(t *testing.T) {
		sim := newSim(t, netsim.Config{LookupHost: lookup, Allow: []netsim.Rule{{Host: "127.0.0.1", Port: tcpPort}}}, nil)
		res := runSandbox(t, sim, sandboxOpts{}, "/usr/bin/python3", "-c", pyBanner, "svc.internal", fmt.Sprint(tcpPort))
		if strings.TrimSpace(res.stdout) != "HELLO PING" {
			t.Fatalf("stdout %q stderr %s log %s", res.stdout, res.stderr, dumpLog(t, sim.Log()))
		}
		ev, ok := findEvent(sim.Log(), dryexec.NetworkEvent{Proto: "tcp", Host: "svc.internal", Action: netsim.ActionAllowed})
		if !ok || ev.BytesOut != 5 || ev.BytesIn != 11 {
			t.Fatalf("event %+v in %s", ev, dumpLog(t, sim.Log()))
		}
	})
	t.Run("tcp without rule", func(t *testing.T) {
		before := conns.Load()
		sim := newSim(t, netsim.Config{LookupHost: lookup, Allow: []netsim.Rule{{Host: "127.0.0.1", Port: tcpPort + 1}}}, nil)
		res := runSandbox(t, sim, sandboxOpts{}, "/usr/bin/python3", "-c", pyBanner, "svc.internal", fmt.Sprint(tcpPort))
		if res.code == 0 || conns.Load() != before {
			t.Fatalf("exit %d stdout %q; server conns %d→%d", res.code, res.stdout, before, conns.Load())
		}
		if _, ok := findEvent(sim.Log(), dryexec.NetworkEvent{Proto: "tcp", Host: "svc.internal", Action: netsim.ActionBlocked}); !ok {
			t.Fatalf("no blocked event: %s", dumpLog(t, sim.Log()))
		}
	})
	t.Run("udp allowed", func(t *testing.T) {
		sim := newSim(t, netsim.Config{LookupHost: lookup, Allow: []netsim.Rule{{Host: "127.0.0.1", Port: udpPort, UDP: true}}}, nil)
		res := runSandbox(t, sim, sandboxOpts{}, "/usr/bin/python3", "-c", pyUDP, "svc.internal", fmt.Sprint(udpPort), "5")
		if strings.TrimSpace(res.stdout) != "reply PING" {
			t.Fatalf("stdout %q stderr %s log %s", res.stdout, res.stderr, dumpLog(t, sim.Log()))
		}
		ev, ok := findEvent(sim.Log(), dryexec.NetworkEvent{Proto: "udp", Host: "svc.internal", Action: netsim.ActionAllowed})
		if !ok || ev.BytesOut != 4 || ev.BytesIn != 4 {
			t.Fatalf("event %+v in %s", ev, dumpLog(t, sim.Log()))
		}
	})
	t.Run("udp rule without udp: true", func(t *testing.T) {
		before := udpSeen.Load()
		sim := newSim(t, netsim.Config{LookupHost: lookup, Allow: []netsim.Rule{{Host: "127.0.0.1", Port: udpPort}}}, nil)
		res := runSandbox(t, sim, sandboxOpts{}, "/usr/bin/python3", "-c", pyUDP, "svc.internal", fmt.Sprint(udpPort), "0.5")
		if !strings.HasPrefix(res.stdout, "noreply") || udpSeen.Load() != before {
			t.Fatalf("stdout %q, server datagrams %d→%d", res.stdout, before, udpSeen.Load())
		}
		if _, ok := findEvent(sim.Log(), dryexec.NetworkEvent{Proto: "udp", Action: netsim.ActionBlocked}); !ok {
			t.Fatalf("no blocked udp event: %s", dumpLog(t, sim.Log()))
		}
	})
}

// TestBypassAttempts: ways a sandbox might try to reach the host's real
// server around the rules. None of them reaches it.
func TestBypassAttempts(t *testing.T) {
	cs := newCountingServer(t)
	port := cs.port()
	cases := []struct {
		name string
		addr string
		want string // python's output prefix
	}{
		// 127.0.0.1 inside the sandbox is the sandbox's own loopback.
		{"literal loopback", "127.0.0.1", "failed ConnectionRefusedError"},
		// The gateway address is netsim itself, not the host.
		{"the gateway", "10.199.0.1", "connected b'HTTP/1.0 403'"},
		// A synthetic address DNS never handed out is refused outright.
		{"an unassigned synthetic address", "198.18.9.9", "failed ConnectionRefusedError"},
		// A literal public address has no rule.
		{"a literal address", "203.0.113.1", "connected b'HTTP/1.0 403'"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := cs.tcpConns.Load()
			sim := newSim(t, netsim.Config{LookupHost: resolveTo("api.internal", "127.0.0.1"),
				Allow: []netsim.Rule{{Host: "127.0.0.1", Port: port}}}, nil)
			res := runSandbox(t, sim, sandboxOpts{}, "/usr/bin/python3", "-c", pyConnect, tc.addr, fmt.Sprint(port))
			if !strings.HasPrefix(res.stdout, tc.want) {
				t.Fatalf("stdout %q want %q; stderr %s; log %s", res.stdout, tc.want, res.stderr, dumpLog(t, sim.Log()))
			}
			if cs.tcpConns.Load() != before {
				t.Fatal("the host's server was reached")
			}
		})
	}
}

const pyFront = `import socket, sys
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=5)
s.sendall(("%s / HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n" % (sys.argv[3], sys.argv[4])).encode())
data = b""
while True:
    b = s.recv(4096)
    if not b:
        break
    data += b
print(data.split(b"\r\n")[0].decode())
`

// TestHostHeaderMustMatch: an allowed connection cannot carry a request for
// another host (domain fronting) or a CONNECT tunnel.
func TestHostHeaderMustMatch(t *testing.T) {
	cs := newCountingServer(t)
	port := cs.port()
	cases := []struct {
		name, method, host, want string
		reach                    bool
	}{
		{"matching host", "GET", fmt.Sprintf("api.internal:%d", port), "HTTP/1.1 200 OK", true},
		{"matching host, other case", "GET", "API.internal", "HTTP/1.1 200 OK", true},
		{"fronted host", "GET", "evil.example.com", "HTTP/1.1 403 Forbidden", false},
		{"connect tunnel", "CONNECT", "api.internal:443", "HTTP/1.1 403 Forbidden", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := cs.tcpConns.Load()
			sim := newSim(t, netsim.Config{LookupHost: resolveTo("api.internal", "127.0.0.1"),
				Allow: []netsim.Rule{{Host: "127.0.0.1", Port: port}}}, nil)
			res := runSandbox(t, sim, sandboxOpts{}, "/usr/bin/python3", "-c", pyFront, "api.internal", fmt.Sprint(port), tc.method, tc.host)
			if strings.TrimSpace(res.stdout) != tc.want {
				t.Fatalf("stdout %q want %q; stderr %s; log %s", res.stdout, tc.want, res.stderr, dumpLog(t, sim.Log()))
			}
			if reached := cs.tcpConns.Load() > before; reached != tc.reach {
				t.Fatalf("server reached = %v", reached)
			}
		})
	}
}

// TestLogRedactsAndBounds: the sandbox's own credentials are redacted in the
// records, and bodies are cut at MaxBodyBytes (with the flag set) while the
// byte counts stay true.
func TestLogRedactsAndBounds(t *testing.T) {
	sim := newSim(t, netsim.Config{MaxBodyBytes: 8}, map[string]string{"mocks.yaml": "routes:\n  - path: /x\n    body: a-long-response-body\n"})
	res := runSandbox(t, sim, sandboxOpts{}, "curl", "-sS", "-H", "Authorization: Bearer sandbox-own-token", "-H", "Cookie: id=cookie-value",
		"--data", "a-long-request-body", "http://api.example.com/x")
	if res.stdout != "a-long-response-body" {
		t.Fatalf("stdout %q stderr %s", res.stdout, res.stderr)
	}
	var rec *netsim.Record
	for _, r := range sim.Records() {
		if r.Proto == "http" {
			rec = &r
		}
	}
	if rec == nil {
		t.Fatalf("no http record: %s", dumpLog(t, sim.Log()))
	}
	if http.Header(rec.RequestHeader).Get("Authorization") != "[redacted]" || http.Header(rec.RequestHeader).Get("Cookie") != "[redacted]" {
		t.Errorf("headers not redacted: %v", rec.RequestHeader)
	}
	if string(rec.RequestBody) != "a-long-r" || !rec.RequestTruncated || string(rec.ResponseBody) != "a-long-r" || !rec.ResponseTruncated {
		t.Errorf("bodies not bounded: %q %v %q %v", rec.RequestBody, rec.RequestTruncated, rec.ResponseBody, rec.ResponseTruncated)
	}
	if rec.BytesOut != 19 || rec.BytesIn != 20 || rec.Method != "POST" {
		t.Errorf("counts %+v", rec.NetworkEvent)
	}
}
