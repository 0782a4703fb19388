package network

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/netsim/tun"
	"github.com/dryexec/dryexec/session"
)

// openNetSession opens an ns session with the given --net specs, closed when
// t ends.
func openNetSession(t *testing.T, specs ...string) *session.Session {
	t.Helper()
	s, _ := openNetSessionCA(t, specs...)
	return s
}

// openNetSessionCA is openNetSession, also returning the CA directory.
func openNetSessionCA(t *testing.T, specs ...string) (*session.Session, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	ca := filepath.Join(t.TempDir(), "ca")
	s, err := session.Open(ctx, session.Options{Rung: "ns", Net: specs, NetCADir: ca, Env: testPath})
	if err != nil {
		t.Fatalf("opening an ns session with --net %v: %v", specs, err)
	}
	t.Cleanup(func() { s.Close() })
	return s, ca
}

// shell runs command in s and fails t if it cannot.
func shell(t *testing.T, s *session.Session, command string) (stdout string, network []dryexec.NetworkEvent) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	r, err := s.Shell(ctx, command, time.Minute)
	if err != nil {
		t.Fatalf("shell %q: %v", command, err)
	}
	return r.Stdout, r.Network
}

// has reports whether events hold one of proto to host with action.
func has(events []dryexec.NetworkEvent, proto, host, action string) bool {
	for _, e := range events {
		if e.Proto == proto && e.Host == host && e.Action == action {
			return true
		}
	}
	return false
}

func hasURL(events []dryexec.NetworkEvent, url, action string) bool {
	for _, e := range events {
		if e.URL == url && e.Action == action {
			return true
		}
	}
	return false
}

// TestSessionNetMock: an ns session's network goes through one netsim for the
// session's life: mocks answer curl over HTTP and HTTPS in one exec and again
// in the next, and Python's urllib too; each result lists its own exec's
// requests (not the earlier ones), the session's log lists them all, and the
// trust setup is no change in the session's diff.
func TestSessionNetMock(t *testing.T) {
	requireTUN(t)
	mock := filepath.Join(t.TempDir(), "mock.yaml")
	if err := os.WriteFile(mock, []byte("routes:\n  - host: api.example.com\n    path: /users/{id}\n    status: 201\n    body: mocked-user\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, ca := openNetSessionCA(t, "mock:"+mock)
	if w := s.Warnings(); len(w) != 0 {
		t.Errorf("warnings with a TUN device: %q", w)
	}

	out, first := shell(t, s, `curl -sS https://api.example.com/users/7; echo; curl -sS -o /dev/null -w '%{http_code}\n' http://api.example.com/users/8`)
	if out != "mocked-user\n201\n" {
		t.Errorf("first exec printed %q, want the mocked body and status", out)
	}
	for _, want := range []string{"https://api.example.com/users/7", "http://api.example.com/users/8"} {
		if !hasURL(first, want, "mocked") {
			t.Errorf("the first exec's network lacks a mocked %s: %+v", want, first)
		}
	}

	// The second exec: the same netsim (the session's), a fresh list.
	out, second := shell(t, s, `curl -sS https://api.example.com/users/9; echo; curl -s -o /dev/null -w '%{http_code}\n' https://elsewhere.example.org/`)
	if out != "mocked-user\n403\n" {
		t.Errorf("second exec printed %q, want the mocked body and the block status", out)
	}
	if !hasURL(second, "https://api.example.com/users/9", "mocked") || !has(second, "https", "elsewhere.example.org", "blocked") {
		t.Errorf("the second exec's network lacks its requests: %+v", second)
	}
	if hasURL(second, "https://api.example.com/users/7", "mocked") {
		t.Errorf("the second exec's network repeats the first exec's: %+v", second)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	py, err := s.Python(ctx, "import urllib.request as u\nbody = u.urlopen('https://api.example.com/users/10').read().decode()", nil, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !py.OK || py.Outputs["body"].JSON != "mocked-user" {
		t.Errorf("urllib got %+v (error %+v), want the mocked body", py.Outputs, py.Error)
	}
	if !hasURL(py.Network, "https://api.example.com/users/10", "mocked") {
		t.Errorf("the Python exec's network lacks its request: %+v", py.Network)
	}

	all := s.Network()
	for _, want := range []string{"https://api.example.com/users/7", "https://api.example.com/users/9", "https://api.example.com/users/10"} {
		if !hasURL(all, want, "mocked") {
			t.Errorf("the session's log lacks %s: %+v", want, all)
		}
	}
	if len(all) < len(first)+len(second)+len(py.Network) {
		t.Errorf("the session's log has %d events, fewer than its execs listed (%d, %d, %d)", len(all), len(first), len(second), len(py.Network))
	}

	d, err := s.Diff(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Writes)+len(d.Deletes)+len(d.Modes)+len(d.Links) != 0 {
		t.Errorf("netsim's set-up shows in the diff: %+v", d)
	}
	out, _ = shell(t, s, `echo "$SSL_CERT_FILE"; grep -c 'BEGIN CERTIFICATE' "$SSL_CERT_FILE" >/dev/null && echo trusted; echo x > /etc/resolv.conf 2>/dev/null && echo WROTE; true`)
	if !strings.HasSuffix(out, "trusted\n") || strings.Contains(out, "WROTE") || strings.TrimSpace(strings.Split(out, "\n")[0]) == "" {
		t.Errorf("trust setup as the sandbox sees it: %q", out)
	}
	// The CA's key exists on the host, and the sandbox cannot read it.
	if b, err := os.ReadFile(filepath.Join(ca, "netsim-ca.pem")); err != nil || !strings.Contains(string(b), "PRIVATE KEY") {
		t.Fatalf("the CA key on the host: %v", err)
	}
	if out, _ = shell(t, s, "cat "+ca+"/netsim-ca.pem 2>/dev/null | grep -c 'PRIVATE KEY'; true"); out != "0\n" {
		t.Errorf("the sandbox reads the CA key: %q", out)
	}
}

// countingListener counts the connections a real server accepted.
type countingListener struct {
	net.Listener
	n atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// TestSessionNetNone: with none, a session reaches nothing: a connection to a
// real server on the test's side (curl, and Python's raw socket) is refused
// and logged as blocked, and the server sees no connection.
func TestSessionNetNone(t *testing.T) {
	requireTUN(t)
	inner, err := net.Listen("tcp", net.JoinHostPort(serverAddr, "0"))
	if err != nil {
		t.Fatal(err)
	}
	l := &countingListener{Listener: inner}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := inner.Addr().(*net.TCPAddr).Port

	s := openNetSession(t, "none")
	out, events := shell(t, s, fmt.Sprintf(`curl -sS -m 5 http://%s:%d/ 2>/dev/null || echo refused; curl -sS -m 5 http://example.com/ 2>/dev/null || echo refused`, serverAddr, port))
	if out != "refused\nrefused\n" {
		t.Errorf("stdout %q, want both refused", out)
	}
	if !has(events, "tcp", serverAddr, "blocked") || !has(events, "dns", "example.com", "blocked") {
		t.Errorf("the exec's network lacks the blocked attempts: %+v", events)
	}

	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	py, err := s.Python(ctx, fmt.Sprintf("import socket\ns = socket.socket()\ns.settimeout(5)\ntry:\n    s.connect(('%s', %d))\n    got = 'connected'\nexcept OSError as e:\n    got = 'refused'", serverAddr, port), nil, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if py.Outputs["got"].JSON != "refused" {
		t.Errorf("Python's raw connect: %+v (error %+v), want refused", py.Outputs, py.Error)
	}
	if !has(py.Network, "tcp", serverAddr, "blocked") {
		t.Errorf("the Python exec's network lacks the blocked connect: %+v", py.Network)
	}
	if n := l.n.Load(); n != 0 {
		t.Errorf("the real server accepted %d connections from a --net none session", n)
	}
}

// TestSessionNetCloseLeaksNothing: closing a session stops its netsim: no
// goroutine of netsim or the netstack is left, no descriptor of ours stays
// open, and nothing holds the sandbox's network namespace.
func TestSessionNetCloseLeaksNothing(t *testing.T) {
	requireTUN(t)
	fdsBefore := openFDs(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s, err := session.Open(ctx, session.Options{Rung: "ns", Net: []string{"none"}, NetCADir: filepath.Join(t.TempDir(), "ca"), Env: testPath})
	if err != nil {
		t.Fatal(err)
	}
	r, err := s.Shell(ctx, `readlink /proc/self/ns/net; curl -s -m 5 http://example.com/ >/dev/null; true`, time.Minute)
	if err != nil {
		s.Close()
		t.Fatal(err)
	}
	netns := strings.TrimSpace(r.Stdout)
	if !strings.HasPrefix(netns, "net:[") || len(r.Network) == 0 {
		s.Close()
		t.Fatalf("the exec saw netns %q and logged %+v", netns, r.Network)
	}
	s.Close()

	// netsim closes the TUN file in the background (unregistering the device
	// waits for RCU grace periods, netsim/serve_linux.go), and that file is
	// what holds the namespace: so, like goleak, wait for the state to settle
	// (bounded, far beyond the ~20 ms it takes) and report what is left.
	var left []string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		left = leftovers(t, fdsBefore, netns)
		if len(left) == 0 || time.Now().After(deadline) {
			break
		}
	}
	for _, l := range left {
		t.Error(l)
	}
}

// leftovers lists what a closed session left: netsim goroutines, descriptors
// beyond fdsBefore, holders of namespace netns.
func leftovers(t *testing.T, fdsBefore int, netns string) []string {
	var left []string
	buf := make([]byte, 1<<20)
	stacks := string(buf[:runtime.Stack(buf, true)])
	for _, g := range strings.Split(stacks, "\n\n") {
		if strings.Contains(g, "dryexec/netsim") || strings.Contains(g, "gvisor.dev/gvisor") {
			left = append(left, "a netsim goroutine outlived the session:\n"+g)
		}
	}
	if after := openFDs(t); after != fdsBefore {
		left = append(left, fmt.Sprintf("%d descriptors open before the session, %d after it closed", fdsBefore, after))
	}
	procs, _ := filepath.Glob("/proc/[0-9]*/ns/net")
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, p := range append(procs, fds...) {
		if l, err := os.Readlink(p); err == nil && l == netns {
			left = append(left, fmt.Sprintf("%s still holds the session's network namespace %s", p, netns))
		}
	}
	return left
}

func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// BenchmarkSessionNet: an ns session with its netsim: open, one exec of
// true, close; and, in one open session, an exec whose curl resolves a name
// and connects (both refused and logged).
func BenchmarkSessionNet(b *testing.B) {
	testreq.Need(b, testreq.Netsim, tun.CheckTUN())
	ca := filepath.Join(b.TempDir(), "ca")
	open := func(b *testing.B) *session.Session {
		s, err := session.Open(b.Context(), session.Options{Rung: "ns", Net: []string{"none"}, NetCADir: ca, Env: testPath})
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	b.Run("open_exec_close", func(b *testing.B) {
		for b.Loop() {
			s := open(b)
			if _, err := s.Shell(b.Context(), "true", time.Minute); err != nil {
				b.Fatal(err)
			}
			s.Close()
		}
	})
	b.Run("exec_refused_curl", func(b *testing.B) {
		s := open(b)
		defer s.Close()
		for b.Loop() {
			r, err := s.Shell(b.Context(), "curl -s -m 5 http://example.com/ >/dev/null; true", time.Minute)
			if err != nil || len(r.Network) == 0 {
				b.Fatalf("%v %+v", err, r)
			}
		}
	})
}
