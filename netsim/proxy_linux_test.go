package netsim_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/netsim"
)

// serveProxy runs sim as an HTTP proxy on a loopback port for the test's
// life and returns the proxy's URL. Cleanup cancels it and checks it ended
// cleanly (goleak, in TestMain, checks nothing it started is left).
func serveProxy(t *testing.T, sim *netsim.Sim) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sim.ServeProxy(ctx, lis) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeProxy: %v", err)
		}
	})
	return "http://" + lis.Addr().String()
}

// curlVia runs curl with the proxy in its environment, as the seatbelt rung
// sets it for a command, trusting sim's CA; it returns "BODY STATUS".
func curlVia(t *testing.T, sim *netsim.Sim, proxy, url string) string {
	t.Helper()
	bundle := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(bundle, sim.Trust().CAPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(testreq.NeedTool(t, "curl"), "-sS", "-w", " %{http_code}", url)
	cmd.Env = []string{"http_proxy=" + proxy, "https_proxy=" + proxy, "CURL_CA_BUNDLE=" + bundle, "PATH=" + os.Getenv("PATH")}
	out, _ := cmd.Output() // a refused CONNECT exits non-zero with status 000
	return strings.TrimSpace(string(out))
}

// TestProxyNone: through the proxy with --net none, plain HTTP and a
// CONNECT tunnel are refused and logged as the transparent path logs a
// refused connection, and a real server on loopback sees nothing.
func TestProxyNone(t *testing.T) {
	cs := newCountingServer(t)
	sim := newSim(t, netsim.Config{}, nil)
	proxy := serveProxy(t, sim)
	url := fmt.Sprintf("http://127.0.0.1:%d/x", cs.port())
	if got := curlVia(t, sim, proxy, url); got != `{"error":"blocked by dryexec netsim"}`+" 403" && !strings.HasSuffix(got, " 403") {
		t.Fatalf("plain http: %q", got)
	}
	if got := curlVia(t, sim, proxy, "https://secure.example.com/v1/x"); strings.Contains(got, "200") {
		t.Fatalf("https through a CONNECT: %q", got)
	}
	if n := cs.tcpConns.Load(); n != 0 {
		t.Fatalf("the real server had %d connections", n)
	}
	for _, host := range []string{"127.0.0.1", "secure.example.com"} {
		ev, ok := findEvent(sim.Log(), dryexec.NetworkEvent{Proto: "tcp", Host: host, Action: netsim.ActionBlocked})
		if !ok || ev.Reason != "network mode none" {
			t.Fatalf("%s: %+v (found %v) in %s", host, ev, ok, dumpLog(t, sim.Log()))
		}
	}
}

// TestProxyPolicy: mocks, allow rules and the block response apply to what
// comes through the proxy as to what comes through the netstack: a mocked
// name over HTTP and over HTTPS in a CONNECT tunnel (TLS terminated with the
// CA), an allowed address reaching the real server, and a port no rule
// allows never reaching it.
func TestProxyPolicy(t *testing.T) {
	cs := newCountingServer(t)
	port := cs.port()
	sim := newSim(t, netsim.Config{Allow: []netsim.Rule{{Host: "127.0.0.1", Port: port}}}, map[string]string{"mocks.yaml": mockFile})
	proxy := serveProxy(t, sim)
	cases := []struct {
		url, want string
		ev        dryexec.NetworkEvent
		reason    string
	}{
		{"http://api.example.com/users/7", `{"name":"ada"} 200`, dryexec.NetworkEvent{Proto: "http", URL: "http://api.example.com/users/7", Action: netsim.ActionMocked, Status: 200}, "mock"},
		{"https://secure.example.com/v1/x?q=1", "secure-ok 201", dryexec.NetworkEvent{Proto: "https", URL: "https://secure.example.com/v1/x?q=1", Action: netsim.ActionMocked, Status: 201}, "mock"},
		{fmt.Sprintf("http://127.0.0.1:%d/hello", port), "real server saw GET /hello 200", dryexec.NetworkEvent{Proto: "http", Host: "127.0.0.1", Action: netsim.ActionAllowed, Status: 200}, "allowed by rule 127.0.0.1"},
		{"http://api.example.com/nothing", "nope 451", dryexec.NetworkEvent{Proto: "http", URL: "http://api.example.com/nothing", Action: netsim.ActionBlocked, Status: 451}, "no allow rule matches"},
		{fmt.Sprintf("http://127.0.0.1:%d/other-port", port+1), "nope 451", dryexec.NetworkEvent{Proto: "http", URL: fmt.Sprintf("http://127.0.0.1:%d/other-port", port+1), Action: netsim.ActionBlocked}, "no allow rule matches"},
	}
	for _, tc := range cases {
		if got := curlVia(t, sim, proxy, tc.url); got != tc.want {
			t.Fatalf("%s: got %q, want %q\nlog %s", tc.url, got, tc.want, dumpLog(t, sim.Log()))
		}
		ev, ok := findEvent(sim.Log(), tc.ev)
		if !ok || !strings.Contains(ev.Reason, tc.reason) {
			t.Fatalf("%s: no event %+v ~%q in %s", tc.url, tc.ev, tc.reason, dumpLog(t, sim.Log()))
		}
	}
	if n := cs.tcpConns.Load(); n != 1 {
		t.Fatalf("the real server had %d connections, want 1 (the allowed request)", n)
	}
}

// TestProxyTunnelNotRaw: a CONNECT tunnel is no way around the policy: a
// tunnel that carries something other than HTTP or TLS, to a destination no
// rule allows as raw TCP, is reset and logged; a request that is not a
// proxy request is refused and logged.
func TestProxyTunnelNotRaw(t *testing.T) {
	cs := newCountingServer(t)
	sim := newSim(t, netsim.Config{}, map[string]string{"mocks.yaml": mockFile})
	proxy := strings.TrimPrefix(serveProxy(t, sim), "http://")

	c, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprintf(c, "CONNECT 127.0.0.1:%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n\r\nSSH-2.0-test\r\n", cs.port(), cs.port())
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %v %v", resp, err)
	}
	if b, err := io.ReadAll(br); len(b) != 0 {
		t.Fatalf("the tunnel answered %q (%v)", b, err)
	}
	wantEvent(t, sim, dryexec.NetworkEvent{Proto: "tcp", Host: "127.0.0.1", Action: netsim.ActionBlocked}, "not HTTP, and no rule allows tcp")

	c2, err := net.Dial("tcp", proxy)
	if err != nil {
		t.Fatal(err)
	}
	defer c2.Close()
	fmt.Fprintf(c2, "GET /secret HTTP/1.1\r\nHost: %s\r\n\r\n", proxy)
	if resp, err := http.ReadResponse(bufio.NewReader(c2), nil); err != nil || resp.StatusCode != 400 {
		t.Fatalf("origin-form request: %v %v", resp, err)
	}
	wantEvent(t, sim, dryexec.NetworkEvent{Proto: "http", Method: "GET", Action: netsim.ActionBlocked, Status: 400}, "not a proxy request")
	if n := cs.tcpConns.Load(); n != 0 {
		t.Fatalf("the real server had %d connections", n)
	}
}

// wantEvent waits for no more than the events already logged: each is
// logged before the client sees the refusal (the reset, the 400).
func wantEvent(t *testing.T, sim *netsim.Sim, want dryexec.NetworkEvent, reason string) {
	t.Helper()
	ev, ok := findEvent(sim.Log(), want)
	if !ok || !strings.Contains(ev.Reason, reason) {
		t.Fatalf("no event %+v with reason ~%q in %s", want, reason, dumpLog(t, sim.Log()))
	}
}

// TestProxyListeners: one Sim serves every listener it is given (the same
// port on 127.0.0.1 and ::1, as the seatbelt rung gives it), and only once.
func TestProxyListeners(t *testing.T) {
	sim := newSim(t, netsim.Config{}, map[string]string{"mocks.yaml": mockFile})
	l4, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l4.Addr().(*net.TCPAddr).Port
	l6, err := net.Listen("tcp6", fmt.Sprintf("[::1]:%d", port))
	if err != nil {
		l4.Close()
		testreq.Needf(t, testreq.Netsim, "IPv6 loopback", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sim.ServeProxy(ctx, l4, l6) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("ServeProxy: %v", err)
		}
	}()
	for _, proxy := range []string{fmt.Sprintf("http://127.0.0.1:%d", port), fmt.Sprintf("http://[::1]:%d", port)} {
		if got := curlVia(t, sim, proxy, "http://api.example.com/users/7"); got != `{"name":"ada"} 200` {
			t.Errorf("through %s: %q", proxy, got)
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := sim.ServeProxy(ctx, l); !errors.Is(err, netsim.ErrServed) {
		t.Errorf("a second ServeProxy: %v", err)
	}
}

// TestProxyToken: with a token, the proxy serves only requests that carry
// it (what clients send for a proxy URL with a password): another local
// program without it gets 407, reaches nothing and is not in the log.
func TestProxyToken(t *testing.T) {
	cs := newCountingServer(t)
	port := cs.port()
	sim := newSim(t, netsim.Config{ProxyToken: "s3cret-token", Allow: []netsim.Rule{{Host: "127.0.0.1", Port: port}}}, nil)
	proxy := serveProxy(t, sim)
	url := fmt.Sprintf("http://127.0.0.1:%d/x", port)
	withToken := strings.Replace(proxy, "http://", "http://dryexec:s3cret-token@", 1)
	wrong := strings.Replace(proxy, "http://", "http://dryexec:guess@", 1)
	for _, c := range []struct{ proxy, url, want string }{
		{proxy, url, " 407"},
		{wrong, url, " 407"},
		{proxy, "https://secure.example.com/", "000"},
		{withToken, url, "real server saw GET /x 200"},
	} {
		if got := curlVia(t, sim, c.proxy, c.url); !strings.HasSuffix(got, c.want) {
			t.Errorf("through %s to %s: %q, want ~%q", c.proxy, c.url, got, c.want)
		}
	}
	if n := cs.tcpConns.Load(); n != 1 {
		t.Errorf("the real server had %d connections, want 1", n)
	}
	if log := sim.Log(); len(log) != 1 || log[0].Action != netsim.ActionAllowed {
		t.Errorf("log %s, want the one allowed request", dumpLog(t, log))
	}
}
