package netsim_test

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/netsim"
)

// countingServer is a real server in the test's own network namespace (the
// "host" of the sandbox), counting every TCP connection and UDP datagram.
type countingServer struct {
	http     *httptest.Server
	tcpConns atomic.Int64
	udp      *net.UDPConn
	udpSeen  atomic.Int64
	auth     atomic.Value // last Authorization header seen
}

func newCountingServer(t *testing.T) *countingServer {
	cs := &countingServer{}
	cs.http = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cs.auth.Store(r.Header.Get("Authorization"))
		fmt.Fprintf(w, "real server saw %s %s", r.Method, r.URL.Path)
	}))
	cs.http.Config.ConnState = func(c net.Conn, st http.ConnState) {
		if st == http.StateNew {
			cs.tcpConns.Add(1)
		}
	}
	cs.http.Start()
	t.Cleanup(cs.http.Close)
	u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	cs.udp = u
	t.Cleanup(func() { u.Close() })
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := u.ReadFrom(buf); err != nil {
				return
			}
			cs.udpSeen.Add(1)
		}
	}()
	return cs
}

func (cs *countingServer) port() int {
	return cs.http.Listener.Addr().(*net.TCPAddr).Port
}

func (cs *countingServer) udpPort() int { return cs.udp.LocalAddr().(*net.UDPAddr).Port }

// resolveTo is a host-side resolver that knows one name.
func resolveTo(name string, addr string) func(context.Context, string) ([]netip.Addr, error) {
	return func(_ context.Context, host string) ([]netip.Addr, error) {
		if host == name {
			return []netip.Addr{netip.MustParseAddr(addr)}, nil
		}
		return nil, errNoName(host)
	}
}

const pyNone = `import socket, struct, sys
port = int(sys.argv[1]); uport = int(sys.argv[2])
out = []
try:
    socket.getaddrinfo("example.internal", port)
    out.append("dns:ok")
except Exception as e:
    out.append("dns:fail")
for addr in ["203.0.113.9", "10.199.0.1", "198.18.0.1"]:
    try:
        socket.create_connection((addr, port), timeout=3).close()
        out.append("tcp:ok")
    except Exception as e:
        out.append("tcp:fail")
u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.sendto(b"hello", ("203.0.113.9", uport))
u.settimeout(1)
try:
    u.recvfrom(100); out.append("udp:ok")
except Exception:
    out.append("udp:fail")
ic = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
def csum(b):
    s = sum(struct.unpack("!%dH" % (len(b)//2), b)); s = (s >> 16) + (s & 0xffff); s += s >> 16
    return ~s & 0xffff
pkt = struct.pack("!BBHHH", 8, 0, 0, 1, 1) + b"ping"
pkt = pkt[:2] + struct.pack("!H", csum(pkt)) + pkt[4:]
ic.sendto(pkt, ("203.0.113.9", 0)); ic.settimeout(1)
try:
    ic.recvfrom(100); out.append("icmp:ok")
except Exception:
    out.append("icmp:fail")
print(" ".join(out))
`

// TestNoneBlocksEverything: with --net none, DNS, TCP, UDP and ICMP all fail
// inside the sandbox, each is logged as blocked, and a real server on the
// host's loopback sees nothing.
func TestNoneBlocksEverything(t *testing.T) {
	cs := newCountingServer(t)
	sim := newSim(t, netsim.Config{LookupHost: resolveTo("example.internal", "127.0.0.1")}, nil)
	res := runSandbox(t, sim, sandboxOpts{}, "/usr/bin/python3", "-c", pyNone, fmt.Sprint(cs.port()), fmt.Sprint(cs.udpPort()))
	want := "dns:fail tcp:fail tcp:fail tcp:fail udp:fail icmp:fail"
	if strings.TrimSpace(res.stdout) != want {
		t.Fatalf("got %q want %q; stderr %s", res.stdout, want, res.stderr)
	}
	log := sim.Log()
	for _, proto := range []string{"dns", "tcp", "udp", "icmp"} {
		if _, ok := findEvent(log, dryexec.NetworkEvent{Proto: proto, Action: netsim.ActionBlocked}); !ok {
			t.Errorf("no blocked %s event in %s", proto, dumpLog(t, log))
		}
	}
	for _, e := range log {
		if e.Action != netsim.ActionBlocked {
			t.Errorf("mode none logged a non-blocked event: %+v", e)
		}
	}
	if n := cs.tcpConns.Load() + cs.udpSeen.Load(); n != 0 {
		t.Fatalf("the host's server saw %d connections/datagrams", n)
	}
}

// TestAllowRules: an allow rule naming 127.0.0.1:PORT lets the sandbox reach
// the real server through a name that resolves there; a rule naming only the
// name is refused because it resolves to loopback; a rule on another port, or
// no rule, never reaches it.
func TestAllowRules(t *testing.T) {
	cs := newCountingServer(t)
	port := cs.port()
	url := fmt.Sprintf("http://example.internal:%d/hello", port)
	cases := []struct {
		name       string
		spec       string
		wantStatus int
		wantAction string
		wantReason string
		reach      bool
	}{
		{"explicit address", fmt.Sprintf("allow:127.0.0.1:%d", port), 200, netsim.ActionAllowed, "allowed by rule 127.0.0.1", true},
		{"name resolving to loopback", "allow:example.internal", 403, netsim.ActionBlocked, "resolves to 127.0.0.1 (loopback)", false},
		{"wildcard resolving to loopback", "allow:*.internal", 403, netsim.ActionBlocked, "resolves to 127.0.0.1", false},
		{"address on another port", fmt.Sprintf("allow:127.0.0.1:%d", port+1), 403, netsim.ActionBlocked, "no allow rule", false},
		{"other host", "allow:example.com", 403, netsim.ActionBlocked, "no allow rule", false},
		{"path prefix outside", fmt.Sprintf("allow:127.0.0.1:%d/api/", port), 403, netsim.ActionBlocked, "no allow rule", false},
		{"path prefix inside", fmt.Sprintf("allow:127.0.0.1:%d/hel", port), 200, netsim.ActionAllowed, "allowed", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := cs.tcpConns.Load()
			// Config.Allow, not AddSpec: the command line refuses a loopback
			// rule (inside a trial 127.0.0.1 is the sandbox's own), but a mock
			// file's rule may name one for a name that resolves there.
			rules, err := netsim.ParseRules(strings.TrimPrefix(tc.spec, "allow:"))
			if err != nil {
				t.Fatal(err)
			}
			cfg := netsim.Config{LookupHost: resolveTo("example.internal", "127.0.0.1"), Allow: rules}
			sim := newSim(t, cfg, nil)
			res := runSandbox(t, sim, sandboxOpts{}, "curl", "-sS", "-o", "/dev/null", "-w", "%{http_code}", url)
			if strings.TrimSpace(res.stdout) != fmt.Sprint(tc.wantStatus) {
				t.Fatalf("status %q, want %d; stderr %s\nlog %s", res.stdout, tc.wantStatus, res.stderr, dumpLog(t, sim.Log()))
			}
			ev, ok := findEvent(sim.Log(), dryexec.NetworkEvent{Proto: "http", Method: "GET", URL: url})
			if !ok || ev.Action != tc.wantAction || !strings.Contains(ev.Reason, tc.wantReason) || ev.Host != "example.internal" || ev.Port != port {
				t.Fatalf("event %+v (found %v), want action %s reason ~%q", ev, ok, tc.wantAction, tc.wantReason)
			}
			if reached := cs.tcpConns.Load() > before; reached != tc.reach {
				t.Fatalf("server reached = %v, want %v", reached, tc.reach)
			}
		})
	}
}

// TestCredentialInjection: a rule adds Authorization from the host's
// environment; the real server gets it; the sandbox's environment, files
// and output, and the log, never hold it.
func TestCredentialInjection(t *testing.T) {
	const secret = "s3cr3t-token-for-netsim-test"
	cs := newCountingServer(t)
	port := cs.port()
	cfg := netsim.Config{
		LookupHost: resolveTo("api.internal", "127.0.0.1"),
		Allow: []netsim.Rule{{Host: "127.0.0.1", Port: port, Inject: map[string]netsim.Secret{
			"Authorization": {Env: "NETSIM_TEST_TOKEN", Prefix: "Bearer "},
		}}},
		// The value lives only in this function: not in this process's
		// environment, so no child can inherit it.
		LookupEnv: func(k string) (string, bool) {
			if k == "NETSIM_TEST_TOKEN" {
				return secret, true
			}
			return "", false
		},
	}
	sim := newSim(t, cfg, nil)
	// The sandbox dumps what it can see of its environment and makes the
	// request; the test looks for the secret in all of it. (The sandbox here
	// shares the test's filesystem, where the test binary itself holds the
	// constant, so a file search from inside would only find that.)
	script := fmt.Sprintf(`env; tr '\0' '\n' </proc/self/environ; curl -sS -v -H 'Cookie: mine=1' http://api.internal:%d/data`, port)
	res := runSandbox(t, sim, sandboxOpts{}, "sh", "-c", script)
	if got := cs.auth.Load(); got != "Bearer "+secret {
		t.Fatalf("server saw Authorization %q", got)
	}
	if !strings.Contains(res.stdout, "real server saw GET /data") {
		t.Fatalf("stdout %q stderr %s", res.stdout, res.stderr)
	}
	if strings.Contains(res.stdout+res.stderr, secret) {
		t.Fatal("the sandbox saw the secret")
	}
	b, _ := json.Marshal(sim.Records())
	if strings.Contains(string(b), secret) {
		t.Fatalf("the log holds the secret: %s", b)
	}
	recs := sim.Records()
	var found bool
	for _, r := range recs {
		if r.Proto == "http" && r.Action == netsim.ActionAllowed {
			found = true
			if http.Header(r.RequestHeader).Get("Cookie") != "[redacted]" {
				t.Errorf("cookie not redacted: %v", r.RequestHeader)
			}
		}
	}
	if !found {
		t.Fatalf("no allowed event: %s", b)
	}
}

// TestAllowedHTTPS: allowed HTTPS is re-encrypted to the real server and
// that server's certificate is verified: with its CA in UpstreamRoots the
// request goes through; against the system roots it fails closed (502, and
// the server never gets a request).
func TestAllowedHTTPS(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		fmt.Fprintf(w, "tls upstream saw %s", r.Host)
	}))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	url := fmt.Sprintf("https://example.com:%d/x", port) // httptest's certificate names example.com
	cases := []struct {
		name   string
		roots  *x509.CertPool
		want   string
		status int
		hits   int64
	}{
		{"upstream verified", pool, "tls upstream saw example.com:", 200, 1},
		{"upstream not trusted", nil, "upstream failed", 502, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := hits.Load()
			sim := newSim(t, netsim.Config{LookupHost: resolveTo("example.com", "127.0.0.1"), UpstreamRoots: tc.roots,
				Allow: []netsim.Rule{{Host: "127.0.0.1", Port: port}}}, nil)
			res := runSandbox(t, sim, sandboxOpts{env: trustEnv}, "curl", "-sS", url)
			if !strings.Contains(res.stdout, tc.want) {
				t.Fatalf("stdout %q stderr %s log %s", res.stdout, res.stderr, dumpLog(t, sim.Log()))
			}
			if ev, ok := findEvent(sim.Log(), dryexec.NetworkEvent{Proto: "https", Action: netsim.ActionAllowed, Status: tc.status}); !ok {
				t.Fatalf("no https event with status %d: %s (%+v)", tc.status, dumpLog(t, sim.Log()), ev)
			}
			if got := hits.Load() - before; got != tc.hits {
				t.Fatalf("server handled %d requests, want %d", got, tc.hits)
			}
		})
	}
}
