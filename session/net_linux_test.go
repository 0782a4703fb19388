package session

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/rootless"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/netsim/tun"
)

// TestNetRootlessFallback: rootless, where /dev/net/tun cannot be opened
// (this machine's node is 0600), an ns session asked for "none" runs with
// loopback only and says so in its warnings, while one asked for mocks or
// allow rules is refused as unavailable isolation, like a trial. Run as root,
// it re-runs itself as nobody.
func TestNetRootlessFallback(t *testing.T) {
	if os.Getuid() == 0 {
		if st, err := os.Stat("/dev/net/tun"); err == nil && st.Mode().Perm()&0o006 == 0o006 {
			t.Skip("/dev/net/tun is open to every user here: the fallback does not apply")
		}
		rootless.Rerun(t, "^TestNetRootlessFallback$", 3*time.Minute)
		return
	}
	if err := tun.CheckTUN(); err == nil {
		t.Skip("this user can open /dev/net/tun: the fallback does not apply")
	}
	ctx := testCtx(t)
	s, err := Open(ctx, Options{Rung: "ns", Net: []string{"none"}, NetCADir: filepath.Join(t.TempDir(), "ca")})
	if err != nil {
		if errors.As(err, new(*dryexec.IsolationUnavailableError)) {
			testreq.Need(t, testreq.NS, err)
		}
		t.Fatal(err)
	}
	defer s.Close()
	if w := strings.Join(s.Warnings(), "\n"); !strings.Contains(w, "network not intercepted") {
		t.Errorf("warnings %q do not say the network is not intercepted", w)
	}
	r, err := s.Shell(ctx, "ls /sys/class/net", time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if r.Stdout != "lo\n" || len(r.Network) != 0 || len(s.Network()) != 0 {
		t.Errorf("interfaces %q, network %+v: want loopback only and no log", r.Stdout, r.Network)
	}

	mock := filepath.Join(t.TempDir(), "mock.yaml")
	if err := os.WriteFile(mock, []byte("routes:\n  - host: api.example.com\n    body: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, spec := range []string{"mock:" + mock, "allow:example.com:8080"} {
		s, err := Open(ctx, Options{Rung: "ns", Net: []string{spec}, NetCADir: filepath.Join(t.TempDir(), "ca")})
		if err == nil {
			s.Close()
			t.Errorf("--net %s without a TUN device: the session opened", spec)
			continue
		}
		if !errors.As(err, new(*dryexec.IsolationUnavailableError)) {
			t.Errorf("--net %s without a TUN device: %v, want IsolationUnavailableError", spec, err)
		}
	}
}

// TestNetHostRungRefused: the host rung shares the host's network, so a
// session there cannot promise any net mode.
func TestNetHostRungRefused(t *testing.T) {
	_, err := Open(testCtx(t), Options{Rung: "host", Net: []string{"none"}})
	if !errors.As(err, new(*dryexec.IsolationUnavailableError)) {
		t.Errorf("a host-rung session with net none: %v, want IsolationUnavailableError", err)
	}
}
