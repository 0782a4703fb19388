package linuxns

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/netsim/tun"
)

// requireTUN skips where this user cannot open /dev/net/tun (then a trial runs
// with loopback only, which TestNetWithoutTUN covers).
func requireTUN(t *testing.T) {
	t.Helper()
	requireNS(t)
	if err := tun.CheckTUN(); err != nil {
		t.Skipf("no TUN here: %v", err)
	}
}

func netSpec(t *testing.T, specs ...string) dryexec.TrialSpec {
	return dryexec.TrialSpec{Net: specs, NetCADir: filepath.Join(t.TempDir(), "ca"),
		Action: dryexec.Action{Env: testPath, TimeoutMS: 60_000}}
}

// TestNetTrials: the ns rung's network goes through netsim: the delta lists
// every attempt, mocks answer HTTP and HTTPS (the sandbox trusts netsim's CA
// through the system store and the variables), allowed traffic reaches a real
// server, and nothing else does.
func TestNetTrials(t *testing.T) {
	requireTUN(t)
	var hits int
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits++
		fmt.Fprintf(w, "real %s", r.URL.Path)
	})}
	// The real server listens on one of this machine's own non-loopback
	// addresses: the sandbox's 127.0.0.1 is its own lo, and an allowed
	// connection to our own address never leaves the machine.
	own := ownAddr(t)
	l, err := net.Listen("tcp", net.JoinHostPort(own, "0"))
	if err != nil {
		t.Fatal(err)
	}
	go srv.Serve(l)
	t.Cleanup(func() { srv.Close() })
	port := l.Addr().(*net.TCPAddr).Port

	mock := filepath.Join(t.TempDir(), "mock.yaml")
	os.WriteFile(mock, []byte("routes:\n  - host: api.example.com\n    path: /users/{id}\n    status: 201\n    body: mocked-user\n"), 0o644)

	for _, tc := range []struct {
		name   string
		specs  []string
		script string
		stdout string            // exactly
		events map[string]string // "proto host" → action, each must appear
		hits   int               // requests the real server saw
	}{
		{"none_blocks_and_logs", nil,
			`curl -sS -m 5 http://example.com/ || echo refused; python3 -c "import socket; s=socket.socket(); s.settimeout(3); s.connect(('93.184.216.34', 80))" 2>/dev/null || echo refused`,
			"refused\nrefused\n", map[string]string{"dns example.com": "blocked", "tcp 93.184.216.34": "blocked"}, 0},
		{"mock_http_and_https", []string{"mock:" + mock},
			`curl -sS https://api.example.com/users/7; echo; python3 -c "import urllib.request as u; print(u.urlopen('https://api.example.com/users/8').read().decode())"`,
			"mocked-user\nmocked-user\n", map[string]string{"https api.example.com": "mocked"}, 0},
		{"mock_unmatched_is_blocked", []string{"mock:" + mock},
			`curl -s -o /dev/null -w '%{http_code}\n' https://elsewhere.example.org/`,
			"403\n", map[string]string{"https elsewhere.example.org": "blocked"}, 0},
		{"allow_reaches_a_real_server", []string{fmt.Sprintf("allow:%s:%d", own, port)},
			fmt.Sprintf(`curl -sS http://%s:%d/ok; echo; curl -s -o /dev/null -w "%%{http_code}\\n" http://%s:%d/no`, own, port, own, port+1),
			"real /ok\n403\n", map[string]string{"http " + own: "allowed"}, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			hits = 0
			d := runTrial(t, t.TempDir(), netSpec(t, tc.specs...), "/bin/sh", "-c", tc.script)
			if d.Process.Stdout != tc.stdout {
				t.Errorf("stdout %q, want %q\nstderr: %s", d.Process.Stdout, tc.stdout, d.Process.Stderr)
			}
			for key, action := range tc.events {
				found := false
				for _, e := range d.Network {
					if e.Proto+" "+e.Host == key && e.Action == action {
						found = true
					}
				}
				if !found {
					t.Errorf("no %s event %q in %+v", action, key, d.Network)
				}
			}
			if d.Totals.NetworkRequests != len(d.Network) {
				t.Errorf("totals count %d requests, the log has %d", d.Totals.NetworkRequests, len(d.Network))
			}
			if hits != tc.hits {
				t.Errorf("the real server saw %d requests, want %d", hits, tc.hits)
			}
			if strings.Contains(strings.Join(d.Action.Argv, " ")+fmt.Sprint(d.Action.Env), "SSL_CERT_FILE") {
				t.Errorf("the trust plumbing leaked into the recorded action: %v", d.Action.Env)
			}
			for _, f := range d.Files {
				if strings.Contains(f.Path, "resolv.conf") || strings.Contains(f.Path, "ca-certificates") {
					t.Errorf("netsim's set-up is reported as a change: %s", f.Path)
				}
			}
		})
	}
}

// ownAddr is a non-loopback IPv4 address of this machine, or skips.
func ownAddr(t *testing.T) string {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() {
			return n.IP.String()
		}
	}
	t.Skip("no non-loopback IPv4 address to serve on")
	return ""
}

// TestNetDeviceUnreachable: the sandbox cannot reach the TUN device's other
// side or make its own way out: no /dev/net/tun, no descriptor, no new route.
func TestNetDeviceUnreachable(t *testing.T) {
	requireTUN(t)
	d := runTrial(t, t.TempDir(), netSpec(t), "/bin/sh", "-c",
		`test -e /dev/net/tun && echo TUN; ls -l /proc/self/fd | grep -c -e socket -e tun; ip route add 1.2.3.0/24 dev dx0 2>/dev/null && echo ROUTE; echo x > /etc/resolv.conf 2>/dev/null && echo WROTE; true`)
	if d.Process.Stdout != "0\n" {
		t.Errorf("stdout %q, want only a zero count\nstderr: %s", d.Process.Stdout, d.Process.Stderr)
	}
}

// TestNetBadSpec: a malformed --net spec is the caller's error, before any sandbox.
func TestNetBadSpec(t *testing.T) {
	requireNS(t)
	for _, s := range []string{"bogus", "mock:/nonexistent/mock.yaml", "allow:", "none:x"} {
		_, err := (&Rung{}).Trial(t.Context(), dryexec.TrialSpec{Net: []string{s}, NetCADir: t.TempDir(),
			Action: dryexec.Action{Argv: []string{"true"}, Cwd: t.TempDir(), Env: testPath}})
		if err == nil {
			t.Errorf("--net %s: no error", s)
		}
	}
}
