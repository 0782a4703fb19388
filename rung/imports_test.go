package rung

import (
	"os/exec"
	"strings"
	"testing"
)

// above are the packages that must reach rungs through this registry and
// the root package's interfaces only: everything they link, at any depth.
var above = []string{"./session", "./server", "./mcpserver", "./internal/cli", "./cmd/dryexec"}

// TestNoRungPackageBelowServer: no package the daemon, the CLI, MCP or
// sessions are built from imports a rung's package (rung/linuxns,
// rung/gvisor, rung/host, …) but this registry and the rungs themselves.
// A new rung is one package and one line in build_*.go; a user of rungs
// that reached into one would tie itself to it. (go-containerregistry
// guards its dependency graph the same way, with go list -deps.)
func TestNoRungPackageBelowServer(t *testing.T) {
	for _, goos := range []string{"linux", "darwin"} {
		t.Run(goos, func(t *testing.T) {
			if bad := rungImporters(t, goos, above...); len(bad) > 0 {
				t.Errorf("imports of a rung package outside package rung:\n%s", strings.Join(bad, "\n"))
			}
		})
	}
}

// rungImporters lists "importer → rung package" for every package in the
// dependency graph of pkgs (built for goos) that imports a rung's package
// and is neither the registry nor a rung.
func rungImporters(t *testing.T, goos string, pkgs ...string) []string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command to list the dependency graph with")
	}
	cmd := exec.Command(goBin, append([]string{"list", "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}"}, pkgs...)...)
	cmd.Dir = ".."
	cmd.Env = append(cmd.Environ(), "GOOS="+goos, "CGO_ENABLED=0")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	const registry = "github.com/dryexec/dryexec/rung"
	isRung := func(p string) bool { return strings.HasPrefix(p, registry+"/") }
	var bad []string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] == registry || isRung(f[0]) {
			continue
		}
		for _, imp := range f[1:] {
			if isRung(imp) {
				bad = append(bad, f[0]+" → "+imp)
			}
		}
	}
	return bad
}

// TestRungImportersFindsOne: the guard sees an import it must refuse (the
// benchmarks use the ns rung's own API, which they may).
func TestRungImportersFindsOne(t *testing.T) {
	if bad := rungImporters(t, "linux", "./bench/cmd/trialbench"); len(bad) == 0 {
		t.Fatal("no rung import found in trialbench, which imports rung/linuxns")
	}
}
