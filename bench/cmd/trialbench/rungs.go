//go:build linux

package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/rung"
	"github.com/dryexec/dryexec/rung/gvisor"
)

// rungsGroup: a cold trial of /bin/true on every rung this host runs, in
// process and through the CLI, against bwrap's cold sandbox and `runsc do`
// (gVisor's own quickest path, no overlay, no delta) in the same run. A rung
// the host cannot run is named under the table, not silently left out.
func rungsGroup(e *env) ([]group, error) {
	g := group{key: "rungs", title: "Cold trial of /bin/true per rung vs bwrap and runsc do", unit: unitMS, bases: []int{0}}
	g.cands = append(g.cands, candidate{name: "bwrap --ro-bind / / --unshare-all --dev /dev --proc /proc /bin/true", label: "bwrap",
		run: timed(e.command(e.empty, "bwrap", "--ro-bind", "/", "/", "--unshare-all", "--dev", "/dev", "--proc", "/proc", "/bin/true"))})
	if runsc, err := gvisor.FindRunsc(""); err == nil {
		state := filepath.Join(e.work, "runsc-do")
		if err := os.MkdirAll(state, 0o700); err != nil {
			return nil, err
		}
		g.bases = append(g.bases, 1)
		g.cands = append(g.cands, candidate{name: "runsc --platform=systrap --network=none do /bin/true", label: "runsc do",
			run: timed(e.command(state, runsc, "--root", state, "--platform="+gvisor.DefaultPlatform, "--network=none", "--ignore-cgroups", "do", "/bin/true"))})
	}
	var missing []string
	for _, name := range rung.Names() {
		r, err := rung.Select(e.ctx, name)
		if err != nil {
			var iu *dryexec.IsolationUnavailableError
			if !errors.As(err, &iu) {
				return nil, err
			}
			missing = append(missing, fmt.Sprintf("%s (%s)", name, iu.Missing))
			continue
		}
		g.cands = append(g.cands,
			candidate{name: fmt.Sprintf("Rung.Trial(/bin/true) on %s, in-process", name),
				run: timed(func() error { return e.trial(r, e.empty, "/bin/true") })},
			candidate{name: fmt.Sprintf("dryexec run --rung %s -- /bin/true (CLI process)", name),
				run: timed(e.command(e.empty, e.bin, "run", "--rung", name, "--no-store", "--json", "--", "/bin/true"))})
	}
	if len(missing) > 0 {
		g.note = "Not measured, the host cannot run them: " + strings.Join(missing, "; ") + "."
	}
	return []group{g}, nil
}
