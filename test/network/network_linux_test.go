package network

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dryexec/dryexec/guest"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/internal/testwait"
	"github.com/dryexec/dryexec/netsim/netrole"
	"github.com/dryexec/dryexec/rung/linuxns"
	"github.com/dryexec/dryexec/schema"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/netsim/tun"
)

// serverAddr is where the tests' real servers listen, on the test namespace's lo.
const serverAddr = "10.77.0.1"

// inNetNS marks the re-executed test binary running in its own network
// namespace.
const inNetNS = "DRYEXEC_TEST_OWN_NETNS"

// TestMain serves as the guest (the rung re-executes this binary), and runs the
// tests inside a network namespace of their own, with only lo: netsim, on the
// host side of each trial, forwards allowed traffic from here, so a bug can
// never send anything off this machine. Only root makes that namespace (a
// user namespace would make the ns rung think it is root); others skip.
func TestMain(m *testing.M) {
	guest.MaybeMain(os.Args)
	netrole.MaybeMain(os.Args)
	if os.Getenv(inNetNS) != "" {
		if err := linkUp("lo"); err != nil {
			fmt.Fprintln(os.Stderr, "lo up:", err)
			os.Exit(1)
		}
		// A second address on this namespace's lo for the real servers: the
		// sandbox's 127.0.0.1 is its own lo, so allowed traffic needs an
		// address that is ours alone (and this namespace has no way out).
		if out, err := exec.Command("ip", "addr", "add", serverAddr+"/32", "dev", "lo").CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "adding %s to lo: %v %s\n", serverAddr, err, out)
			os.Exit(1)
		}
		os.Exit(m.Run())
	}
	if os.Getuid() != 0 {
		fmt.Println("skipping: the network tests need root to run in a network namespace of their own")
		os.Exit(0)
	}
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Env = append(os.Environ(), inNetNS+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Run(); err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			os.Exit(ee.ExitCode())
		}
		fmt.Fprintln(os.Stderr, "cannot make a network namespace for the tests:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

func linkUp(name string) error {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(s)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, ifr); err != nil {
		return err
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	return unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, ifr)
}

var testPath = map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"}

func requireNS(t *testing.T) {
	t.Helper()
	testreq.Need(t, testreq.NS, (&linuxns.Rung{}).Available(context.Background()))
}

// runTrial runs argv in dir and checks the delta against the JSON schema.
func runTrial(t *testing.T, dir string, spec dryexec.TrialSpec, argv ...string) *dryexec.StateDelta {
	t.Helper()
	spec.Action.Argv, spec.Action.Cwd = argv, dir
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	d, err := (&linuxns.Rung{}).Trial(ctx, spec)
	if err != nil {
		t.Fatalf("trial %q: %v", argv, err)
	}
	v, err := schema.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(d)
	if err := v.Validate(b); err != nil {
		t.Fatalf("delta does not validate: %v\n%s", err, b)
	}
	return d
}

// requireTUN skips where this user cannot open /dev/net/tun (then a trial runs
// with loopback only, which TestNetWithoutTUN covers).
func requireTUN(t *testing.T) {
	t.Helper()
	requireNS(t)
	testreq.Need(t, testreq.Netsim, tun.CheckTUN())
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
	// The real server listens on this namespace's lo: netsim forwards from
	// here. An allow rule must name the private address explicitly.
	own := serverAddr
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
		_, err := (&linuxns.Rung{}).Trial(t.Context(), dryexec.TrialSpec{Net: []string{s}, NetCADir: t.TempDir(),
			Action: dryexec.Action{Argv: []string{"true"}, Cwd: t.TempDir(), Env: testPath}})
		if err == nil {
			t.Errorf("--net %s: no error", s)
		}
	}
}

// TestNetLastPacketsLogged: netsim stops as soon as the sandbox's processes
// are gone, while the guest is still reporting files; the packets the last
// process sent just before it exited are still queued on the device then,
// and must be read and logged, cold and from a warm pool alike.
func TestNetLastPacketsLogged(t *testing.T) {
	requireTUN(t)
	const n = 64
	script := fmt.Sprintf(`import os, socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(1, %d):
    s.sendto(b"x", ("10.77.0.%%d" %% i, 9))
os._exit(0)`, n+1)
	check := func(t *testing.T, d *dryexec.StateDelta) {
		t.Helper()
		seen := map[string]bool{}
		for _, e := range d.Network {
			if e.Proto == "udp" && e.Action == "blocked" && strings.HasPrefix(e.Host, "10.77.0.") {
				seen[e.Host] = true
			}
		}
		if len(seen) != n {
			t.Fatalf("%d of the %d datagrams sent just before exit were logged: %+v", len(seen), n, d.Network)
		}
	}
	t.Run("cold", func(t *testing.T) {
		check(t, runTrial(t, t.TempDir(), netSpec(t), "python3", "-c", script))
	})
	t.Run("pooled", func(t *testing.T) {
		dir := t.TempDir()
		spec := netSpec(t)
		spec.Action.Cwd = dir
		p, err := linuxns.NewPool(t.Context(), &linuxns.Rung{}, linuxns.PoolOptions{Size: 1, Spec: spec})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		for i := 0; i < 3; i++ {
			testwait.For(t, time.Minute, "a ready sandbox", func() bool { return p.Stats().Ready >= 1 })
			spec.Action.Argv = []string{"python3", "-c", script}
			d, err := p.Trial(t.Context(), spec)
			if err != nil {
				t.Fatal(err)
			}
			check(t, d)
		}
		if s := p.Stats(); s.Hits == 0 {
			t.Fatalf("no trial took a pooled sandbox: %+v", s)
		}
	})
}
