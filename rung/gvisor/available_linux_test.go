package gvisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
)

// TestAvailableRunsRunsc: the probe runs runsc, so a runsc that is there but
// cannot start a sandbox (here: a platform it does not know) is unavailable,
// and the error names what is missing; so is one that is not there.
func TestAvailableRunsRunsc(t *testing.T) {
	requireGVisor(t)
	cases := []struct {
		name string
		r    Rung
		want string
	}{
		{"no_binary", Rung{Runsc: "/nonexistent/runsc"}, "/nonexistent/runsc"},
		{"platform_refused", Rung{Platform: "no-such-platform"}, "--platform=no-such-platform do /bin/true failed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := c.r.Available(context.Background())
			var iu *dryexec.IsolationUnavailableError
			if !errors.As(err, &iu) || !errors.Is(err, dryexec.ErrIsolationUnavailable) || iu.Rung != Name {
				t.Fatalf("Available: %v, want an IsolationUnavailableError of rung %s", err, Name)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Available: %v, want it to name %q", err, c.want)
			}
		})
	}
}

// TestMakefilePinsRunsc: `make` installs the runsc this package names.
func TestMakefilePinsRunsc(t *testing.T) {
	b, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), "gvisor.dev/gvisor/runsc@"+RunscVersion) {
		t.Fatalf("the Makefile does not install runsc@%s", RunscVersion)
	}
}

// TestAvailableRemembersSuccessOnly: a runsc that passed the probe is not
// probed again (every `dryexec run` asks, and a probe costs a trial), unless
// the binary changes; one that failed is probed every time.
func TestAvailableRemembersSuccessOnly(t *testing.T) {
	requireGVisor(t)
	dir := t.TempDir()
	count := filepath.Join(dir, "count")
	runsc := filepath.Join(dir, "runsc")
	write := func(exit int) {
		t.Helper()
		script := fmt.Sprintf("#!/bin/sh\necho probe >> %s\nexit %d\n", count, exit)
		if err := os.WriteFile(runsc, []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	probes := func() int {
		b, _ := os.ReadFile(count)
		return strings.Count(string(b), "probe")
	}
	r := Rung{Runsc: runsc}
	write(1)
	for range 2 {
		if r.Available(t.Context()) == nil {
			t.Fatal("a runsc that fails is available")
		}
	}
	if n := probes(); n != 2 {
		t.Fatalf("a failing runsc was probed %d times in two calls, want 2", n)
	}
	write(0) // a new mtime (and content): probed again
	for range 3 {
		if err := r.Available(t.Context()); err != nil {
			t.Fatal(err)
		}
	}
	if n := probes(); n != 3 {
		t.Fatalf("%d probes after three calls on a runsc that succeeds, want 3 (one more)", n)
	}
}
