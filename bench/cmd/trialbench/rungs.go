//go:build linux

package main

import (
	"fmt"
	"strings"
)

// rungsGroup: a cold trial of /bin/true on every rung this host runs, in
// process and through the CLI, against bwrap's cold sandbox and `runsc do`
// (gVisor's own quickest path, no overlay, no delta) in the same run; then
// the per-rung tables of perRungGroups (warm trial, session round trip,
// start-up, idle memory). A rung the host cannot run is named under the
// table, not silently left out.
func rungsGroup(e *env) ([]group, error) {
	cands, bases, err := e.rungBases("/bin/true")
	if err != nil {
		return nil, err
	}
	g := group{key: "rungs", title: "Cold trial of /bin/true per rung vs bwrap and runsc do", unit: unitMS, bases: bases, cands: cands}
	rs, missing, err := e.availableRungs()
	if err != nil {
		return nil, err
	}
	for _, name := range rungNames(rs) {
		r := rs[name]
		g.cands = append(g.cands,
			candidate{name: fmt.Sprintf("Rung.Trial(/bin/true) on %s, in-process", name),
				run: timed(func() error { return e.trial(r, e.empty, "/bin/true") })},
			candidate{name: fmt.Sprintf("dryexec run --rung %s -- /bin/true (CLI process)", name),
				run: timed(e.command(e.empty, e.bin, "run", "--rung", name, "--no-store", "--json", "--", "/bin/true"))})
	}
	if len(missing) > 0 {
		g.note = "Not measured, the host cannot run them: " + strings.Join(missing, "; ") + "."
	}
	more, err := perRungGroups(e)
	if err != nil {
		return nil, err
	}
	return append([]group{g}, more...), nil
}
