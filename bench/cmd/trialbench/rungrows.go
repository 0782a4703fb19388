//go:build linux

package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/rung"
	"github.com/dryexec/dryexec/rung/gvisor"
	"github.com/dryexec/dryexec/session"
	"github.com/dryexec/dryexec/wire"
	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
)

// rungBases are the candidates every per-rung table is measured against,
// in the same run: bwrap's cold sandbox and `runsc do` (gVisor's own
// quickest path, no overlay, no delta), running argv. bases are their
// indexes.
func (e *env) rungBases(argv ...string) (cands []candidate, bases []int, err error) {
	cands = append(cands, candidate{name: "bwrap --ro-bind / / --unshare-all --dev /dev --proc /proc " + strings.Join(argv, " "), label: "bwrap",
		run: timed(e.command(e.empty, append([]string{"bwrap", "--ro-bind", "/", "/", "--unshare-all", "--dev", "/dev", "--proc", "/proc"}, argv...)...))})
	bases = append(bases, 0)
	if runsc, err := gvisor.FindRunsc(""); err == nil {
		state := filepath.Join(e.work, "runsc-do")
		if err := os.MkdirAll(state, 0o700); err != nil {
			return nil, nil, err
		}
		cands = append(cands, candidate{name: "runsc --platform=systrap --network=none do " + strings.Join(argv, " "), label: "runsc do",
			run: timed(e.command(state, append([]string{runsc, "--root", state, "--platform=" + gvisor.DefaultPlatform, "--network=none", "--ignore-cgroups", "do"}, argv...)...))})
		bases = append(bases, 1)
	}
	return cands, bases, nil
}

// availableRungs are the rungs this host runs, and why each other one is
// not measured.
func (e *env) availableRungs() (map[string]dryexec.Rung, []string, error) {
	rs := map[string]dryexec.Rung{}
	var missing []string
	for _, name := range rung.Names() {
		r, err := rung.Select(e.ctx, name)
		if err != nil {
			var iu *dryexec.IsolationUnavailableError
			if !errors.As(err, &iu) {
				return nil, nil, err
			}
			missing = append(missing, fmt.Sprintf("%s (%s)", name, iu.Missing))
			continue
		}
		rs[name] = r
	}
	return rs, missing, nil
}

// rungNames are the names of rs in the ladder's order.
func rungNames(rs map[string]dryexec.Rung) []string {
	var names []string
	for _, n := range rung.Names() {
		if rs[n] != nil {
			names = append(names, n)
		}
	}
	return names
}

// perRungGroups are the per-rung tables beside the cold trial: a warm
// (pooled) trial where the rung pools, a session's exec round trip and its
// start-up where the rung holds sessions, and the memory of an idle
// sandbox; each against bwrap and `runsc do` in the same run. A rung left
// out is named under its table, with why.
func perRungGroups(e *env) ([]group, error) {
	rs, missing, err := e.availableRungs()
	if err != nil {
		return nil, err
	}
	names := rungNames(rs)
	var out []group
	for _, mk := range []func(*env, map[string]dryexec.Rung, []string) (group, []string, error){warmRows, sessionRTTRows, startupRows, idleMemoryRows} {
		g, without, err := mk(e, rs, names)
		if err != nil {
			for _, g := range out {
				if g.close != nil {
					g.close()
				}
			}
			return nil, err
		}
		if all := append(slices.Clone(missing), without...); len(all) > 0 {
			g.note = strings.TrimSpace(g.note + " Not measured: " + strings.Join(all, "; ") + ".")
		}
		out = append(out, g)
	}
	return out, nil
}

// warmRows: a trial of /bin/true in a sandbox the rung's pool prepared
// ahead. Before each, unmeasured, the benchmark waits until the pool has a
// sandbox ready and no background work in flight (as the warm group does).
func warmRows(e *env, rs map[string]dryexec.Rung, names []string) (group, []string, error) {
	cands, bases, err := e.rungBases("/bin/true")
	if err != nil {
		return group{}, nil, err
	}
	spec := dryexec.TrialSpec{Action: dryexec.Action{Argv: []string{"/bin/true"}, Cwd: e.empty, Env: benchEnv}}
	var pools []dryexec.Pool
	var without []string
	for _, n := range names {
		pr, ok := rs[n].(dryexec.Pooler)
		if !ok {
			without = append(without, n+" (no warm pool)")
			continue
		}
		pool, err := pr.NewPool(e.ctx, dryexec.PoolOptions{Size: 2, IdleTimeout: -1, Spec: spec})
		if err != nil {
			return group{}, nil, fmt.Errorf("%s pool: %w", n, err)
		}
		pools = append(pools, pool)
		ready := func() error {
			// A vm pool boots its VMs under TCG here: tens of seconds each.
			deadline := time.Now().Add(10 * time.Minute)
			for st := pool.Stats(); st.Ready == 0 || st.Settled < st.Ready || st.Busy > 0; st = pool.Stats() {
				if time.Now().After(deadline) {
					return fmt.Errorf("the pool not ready and quiet after 10 minutes: %+v", pool.Stats())
				}
				time.Sleep(time.Millisecond)
			}
			return nil
		}
		cands = append(cands, candidate{name: "Pool.Trial(/bin/true) on " + n + ", a sandbox ready", prep: ready,
			run: timed(func() error { return checkDelta(pool.Trial(e.ctx, spec)) })})
	}
	return group{key: "rungs", title: "Warm (pooled) trial of /bin/true per rung vs bwrap and runsc do", unit: unitMS, bases: bases, cands: cands,
		close: func() {
			for _, p := range pools {
				p.Close()
			}
		}}, without, nil
}

// sessionRungs are the rungs of names that hold sessions; without names
// the others.
func sessionRungs(rs map[string]dryexec.Rung, names []string) (have, without []string) {
	for _, n := range names {
		if _, ok := rs[n].(dryexec.SessionRung[wire.SessionStart]); ok {
			have = append(have, n)
		} else {
			without = append(without, n+" (no sessions)")
		}
	}
	return have, without
}

func shellTrue(e *env, s *session.Session) error {
	r, err := s.Shell(e.ctx, "true", time.Minute)
	if err == nil && r.ExitCode != 0 {
		err = fmt.Errorf("exit %d: %s", r.ExitCode, r.Transcript)
	}
	return err
}

// sessionRTTRows: exec_shell(true) in a session open on each rung, against
// a cold bwrap and `runsc do` of sh -c true (what running the command
// without a session costs there).
func sessionRTTRows(e *env, rs map[string]dryexec.Rung, names []string) (group, []string, error) {
	cands, bases, err := e.rungBases("sh", "-c", "true")
	if err != nil {
		return group{}, nil, err
	}
	have, without := sessionRungs(rs, names)
	var open []*session.Session
	closeAll := func() {
		for _, s := range open {
			s.Close()
		}
	}
	for _, n := range have {
		s, err := session.Open(e.ctx, session.Options{Rung: n})
		if err != nil {
			closeAll()
			return group{}, nil, fmt.Errorf("%s session: %w", n, err)
		}
		open = append(open, s)
		cands = append(cands, candidate{name: n + ": exec_shell(true) round trip in an open session", run: timed(func() error { return shellTrue(e, s) })})
	}
	return group{key: "rungs", title: "Session exec round trip per rung vs bwrap and runsc do (cold)", unit: unitMS, bases: bases, cands: cands,
		close: closeAll}, without, nil
}

// startupRows: a session's start-up on each rung (open → first
// exec_shell(true) → close), against a cold bwrap and `runsc do` of
// /bin/true. A rung without sessions starts up as its cold trial does (the
// cold trial table).
func startupRows(e *env, rs map[string]dryexec.Rung, names []string) (group, []string, error) {
	cands, bases, err := e.rungBases("/bin/true")
	if err != nil {
		return group{}, nil, err
	}
	have, without := sessionRungs(rs, names)
	for _, n := range have {
		cands = append(cands, candidate{name: n + ": session start → first exec_shell(true) → close", run: timed(func() error {
			s, err := session.Open(e.ctx, session.Options{Rung: n})
			if err != nil {
				return err
			}
			defer s.Close()
			return shellTrue(e, s)
		})})
	}
	return group{key: "rungs", title: "Sandbox start-up per rung (session start to first exec) vs bwrap and runsc do", unit: unitMS, bases: bases, cands: cands,
		note: "For a rung without sessions, start-up is its cold trial (the cold trial table)."}, without, nil
}

// idleMemoryRows: the proportional memory (PSS) of an idle sandbox, summed
// over its processes as the host sees them (the new children of this
// process and everything beneath them), after idleFor: a session after one
// exec_shell on each rung that holds sessions, an idle bwrap and an idle
// `runsc do` running sleep.
func idleMemoryRows(e *env, rs map[string]dryexec.Rung, names []string) (group, []string, error) {
	pssOf := func(before []int) float64 {
		var pss float64
		for _, p := range descendants(slices.DeleteFunc(children(), func(p int) bool { return slices.Contains(before, p) })) {
			_, x := smaps(p)
			pss += x
		}
		return pss
	}
	// idleCommand runs argv in dir (with env added to this process's,
	// when not nil) for idleFor, then kills it.
	idleCommand := func(dir string, env []string, argv ...string) func() (float64, error) {
		return func() (float64, error) {
			before := children()
			c := exec.Command(argv[0], argv[1:]...)
			c.Dir = dir
			if env != nil {
				c.Env = append(os.Environ(), env...)
			}
			if err := c.Start(); err != nil {
				return 0, err
			}
			defer c.Wait()
			defer c.Process.Kill()
			time.Sleep(idleFor) // not ordering: letting the sandbox idle is what is measured
			return pssOf(before), nil
		}
	}
	cands := []candidate{{name: "bwrap --ro-bind / / --unshare-all --dev /dev --proc /proc sleep 600, idle", label: "bwrap",
		run: idleCommand(e.empty, nil, "bwrap", "--ro-bind", "/", "/", "--unshare-all", "--dev", "/dev", "--proc", "/proc", "sleep", "600")}}
	bases := []int{0}
	if runsc, err := gvisor.FindRunsc(""); err == nil {
		state := filepath.Join(e.work, "runsc-idle")
		if err := os.MkdirAll(state, 0o700); err != nil {
			return group{}, nil, err
		}
		// runsc do bind-mounts a network namespace under $TMPDIR, which a
		// killed one leaves mounted: one more host mount per round, which
		// made every later row that copies the mount table slower (bwrap
		// 5.4 -> 7-8 ms after two make bench runs). Its TMPDIR is the
		// benchmark's own, emptied of mounts after each round.
		tmp := filepath.Join(state, "tmp")
		if err := os.MkdirAll(tmp, 0o700); err != nil {
			return group{}, nil, err
		}
		idle := idleCommand(state, []string{"TMPDIR=" + tmp}, runsc, "--root", state, "--platform="+gvisor.DefaultPlatform, "--network=none", "--ignore-cgroups", "do", "sleep", "600")
		cands = append(cands, candidate{name: "runsc --platform=systrap --network=none do sleep 600, idle", label: "runsc do",
			run: func() (float64, error) {
				v, err := idle()
				if uerr := unmountUnder(tmp); err == nil {
					err = uerr
				}
				return v, err
			}})
		bases = append(bases, 1)
	}
	have, without := sessionRungs(rs, names)
	for _, n := range have {
		cands = append(cands, candidate{name: n + ": idle session after one exec_shell(true)", run: func() (float64, error) {
			before := children()
			s, err := session.Open(e.ctx, session.Options{Rung: n})
			if err != nil {
				return 0, err
			}
			defer s.Close()
			if err := shellTrue(e, s); err != nil {
				return 0, err
			}
			time.Sleep(idleFor)
			return pssOf(before), nil
		}})
	}
	return group{key: "rungs", title: fmt.Sprintf("Memory (PSS) per idle sandbox per rung vs bwrap and runsc do (%s idle)", idleFor), unit: unitMiB, bases: bases, cands: cands,
		note: "PSS summed over the sandbox's processes as the host sees them (shared pages divided among sharers); gVisor's sandbox memory is its sentry's, counted there."}, without, nil
}

// unmountUnder detaches every mount at or beneath dir, deepest first.
func unmountUnder(dir string) error {
	infos, err := mountinfo.GetMounts(mountinfo.PrefixFilter(dir))
	if err != nil {
		return err
	}
	slices.SortFunc(infos, func(a, b *mountinfo.Info) int { return len(b.Mountpoint) - len(a.Mountpoint) })
	for _, m := range infos {
		if err := unix.Unmount(m.Mountpoint, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) {
			return fmt.Errorf("unmounting %s: %w", m.Mountpoint, err)
		}
	}
	return nil
}
