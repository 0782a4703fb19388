package gvisor

import (
	"context"
	"errors"
	"os"
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
