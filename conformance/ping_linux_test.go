package conformance

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/dryexec/dryexec/wire"
)

var pingCases = []conformanceCase{
	// Ping names the rung, its staging, the protocol version and the
	// workspace; Info (the answer to session.start) says the same.
	{"reports_rung_staging_version_workspace", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		p, err := s.Ping(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		// gvisor: the guest compares its workspace with a baseline copy
		// (gVisor's overlay cannot rename a directory of its lower); vm
		// keeps it the same way, on a tmpfs of the VM's own.
		wantStaging := map[string]string{"host": "scan", "ns": "overlay", "gvisor": "scan", "vm": "scan"}
		r := rungOf(s)
		if _, known := wantStaging[r]; p.Rung != r || !known {
			t.Errorf("ping rung %q, Info rung %q", p.Rung, r)
		}
		if p.Staging != wantStaging[r] {
			t.Errorf("staging %q, want %q", p.Staging, wantStaging[r])
		}
		if p.Version != wire.Version {
			t.Errorf("version %d, want %d", p.Version, wire.Version)
		}
		switch r {
		case "ns", "gvisor", "vm":
			if p.Workspace != "/workspace" {
				t.Errorf("workspace %q, want /workspace", p.Workspace)
			}
		case "host":
			if !filepath.IsAbs(p.Workspace) || !strings.Contains(p.Workspace, "dryexec-session-") {
				t.Errorf("workspace %q, want a dryexec-session- temp dir", p.Workspace)
			}
		}
		i := s.Info()
		if i.Rung != p.Rung || i.Staging != p.Staging || i.Version != p.Version || i.Workspace != p.Workspace || i.Python != p.Python {
			t.Errorf("Info %+v differs from Ping %+v", i, *p)
		}
	}},
	// The workspace Ping names is where the shell starts.
	{"workspace_is_initial_cwd", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		r := sh(t, s, "pwd -P")
		if r.Stdout != s.Info().Workspace+"\n" || r.Cwd != s.Info().Workspace {
			t.Fatalf("pwd %q, Cwd %q; want the workspace %q", r.Stdout, r.Cwd, s.Info().Workspace)
		}
	}},
	// Ping keeps answering across execs.
	{"repeated", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		for i := 0; i < 3; i++ {
			run(t, s, "true")
			if p, err := s.Ping(ctx(t)); err != nil || p.Rung != rungOf(s) {
				t.Fatalf("ping %d: %+v, %v", i, p, err)
			}
		}
	}},
}
