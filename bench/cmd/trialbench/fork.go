//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"github.com/dryexec/dryexec/session"
)

// forkTree is the workspace a fork is measured on (the figure).
const forkTree = 100_000

// forkGroup: forking a session whose workspace holds 100,000 files, on ns,
// host and gvisor (where it runs), against `cp -a` of the same tree in the same run; the pause the
// parent sees; a compare of two branches; and the memory an extra branch
// costs.
func forkGroup(e *env) ([]group, error) {
	tree, err := e.tree(forkTree)
	if err != nil {
		return nil, err
	}
	ctx := e.ctx
	open := func(rung, dir string) (*session.Session, error) {
		s, err := session.Open(ctx, session.Options{Rung: rung})
		if err != nil {
			return nil, fmt.Errorf("%s session: %w", rung, err)
		}
		if dir != "" {
			if err := s.PushDir(ctx, dir); err != nil {
				s.Close()
				return nil, err
			}
			// Half the changes an agent would make sit in the upper: one
			// exec's worth of writes the fork freezes.
			if r, err := s.Shell(ctx, "for i in $(seq 100); do echo $i > d0/new$i; done", time.Minute); err != nil || r.ExitCode != 0 {
				s.Close()
				return nil, fmt.Errorf("writing: %v %+v", err, r)
			}
		}
		return s, nil
	}
	var opened []*session.Session
	closeAll := func() {
		for _, s := range opened {
			s.Close()
		}
	}
	sessions := map[string]*session.Session{}
	kinds := []struct{ name, rung, dir string }{{"ns", "ns", tree}, {"ns-empty", "ns", ""}, {"host", "host", tree}}
	// gvisor's rows where it runs here (runsc found and working).
	gvisorErr := session.CheckRung(ctx, "gvisor")
	if gvisorErr == nil {
		kinds = append(kinds, struct{ name, rung, dir string }{"gvisor", "gvisor", tree})
	} else {
		fmt.Fprintf(os.Stderr, "fork: no gvisor rows: %v\n", gvisorErr)
	}
	for _, k := range kinds {
		s, err := open(k.rung, k.dir)
		if err != nil {
			closeAll()
			return nil, err
		}
		opened = append(opened, s)
		sessions[k.name] = s
	}
	var branch []*session.Session // the last fork's, closed before the next
	dropBranches := func() error {
		for _, b := range branch {
			b.Close()
		}
		branch = nil
		return nil
	}
	fork := func(name string) func() (float64, error) {
		return timed(func() error {
			bs, err := sessions[name].Fork(ctx, 1)
			branch = bs
			return err
		})
	}
	var pause float64
	copyDir := filepath.Join(e.work, "forkcopy")
	cands := []candidate{
		{name: fmt.Sprintf("cp -a of the %d-file tree (baseline)", forkTree), label: "cp -a",
			prep: func() error { return os.RemoveAll(copyDir) },
			run:  timed(func() error { return exec.Command("cp", "-a", tree, copyDir).Run() })},
		{name: fmt.Sprintf("ns: fork(1) of a %d-file session, total (freeze + the branch's sandbox start)", forkTree), label: "ns fork", prep: dropBranches, run: func() (float64, error) {
			v, err := fork("ns")()
			pause = msOf(sessions["ns"].ForkPause())
			return v, err
		}},
		{name: "ns: the parent's pause in that fork (the freeze; no file copied)", run: func() (float64, error) { return pause, nil }},
		{name: "ns: fork(1) of an empty session, total", prep: dropBranches, run: fork("ns-empty")},
		{name: "ns: a session's first fork (no branch opened ahead yet: a cold sandbox start), total", prep: func() error {
			if err := dropBranches(); err != nil {
				return err
			}
			s, err := open("ns", "")
			if err != nil {
				return err
			}
			opened = append(opened, s)
			sessions["ns-first"] = s
			return nil
		}, run: fork("ns-first")},
		{name: fmt.Sprintf("host: fork(1) of a %d-file session, total (a copy of the tree)", forkTree), prep: dropBranches, run: fork("host")},
	}
	if gvisorErr == nil {
		var gvPause float64
		cands = append(cands,
			candidate{name: fmt.Sprintf("gvisor: fork(1) of a %d-file session, total (runsc checkpoint of the parent, its upper dirs copied, a branch restored)", forkTree), prep: dropBranches, run: func() (float64, error) {
				v, err := fork("gvisor")()
				gvPause = msOf(sessions["gvisor"].ForkPause())
				return v, err
			}},
			candidate{name: "gvisor: the parent's pause in that fork (its checkpoint)", run: func() (float64, error) { return gvPause, nil }})
	}
	cands = append(cands, []candidate{
		{name: "ns: compare of two branches (one change each)", prep: func() error {
			if err := dropBranches(); err != nil {
				return err
			}
			bs, err := sessions["ns"].Fork(ctx, 2)
			if err != nil {
				return err
			}
			branch = bs
			for i, b := range bs {
				if r, err := b.Shell(ctx, fmt.Sprintf("echo %d > d0/f0", i), time.Minute); err != nil || r.ExitCode != 0 {
					return fmt.Errorf("branch shell: %v", err)
				}
			}
			return nil
		}, run: timed(func() error {
			r, err := session.Compare(ctx, []string{"a", "b"}, branch...)
			if err == nil && r.Differ != 1 {
				err = fmt.Errorf("compare: %+v", r)
			}
			return err
		})},
	}...)
	g := group{key: "fork", title: fmt.Sprintf("Fork a live session (workspace of %d files, 100 of them written since the push)", forkTree),
		unit: unitMS, bases: []int{0, 1}, cands: cands, close: func() { dropBranches() },
		// A round copies the 100,000-file tree (cp -a, the host fork) and
		// checkpoints a gvisor sandbox holding it: at -n 20 this group alone
		// ran past 40 minutes on the 2-CPU VM, where the rest of make bench
		// takes about 8.
		rounds: 5,
		note: "A fork on ns freezes the session's upper as a read-only layer shared by the parent and the branch: its cost does not grow with the tree. " +
			"The branch is a session its fork family opened ahead (its own namespaces, cgroup, netsim, guest), handed the frozen layers: the total is the freeze, the hand-over and the branch's remount; " +
			"a family's first fork starts its branch cold (that row), and the family keeps as many opened ahead as its largest fork since. The pause is what the parent waits. " +
			"The host rung copies the tree (reflink where the filesystem has it). " +
			"A gvisor workspace is a tmpfs in its sandbox's own kernel, which no other sandbox can mount: the fork checkpoints the parent's sandbox (runsc checkpoint --leave-running: the parent's pause) " +
			"and restores a new sandbox from it for the branch; the checkpoint holds that tmpfs, so its cost grows with the tree."}

	// The memory group forks the same session: the sessions close after it.
	mem := group{key: "fork", title: "Memory per extra branch (ns, one exec_shell, idle)", unit: unitMiB, bases: []int{0}, close: closeAll}
	mem.cands = []candidate{
		{name: "a fresh ns session's guest (PSS)", label: "session", run: func() (float64, error) {
			return pssOf(func() (func(), error) {
				s, err := session.Open(ctx, session.Options{Rung: "ns"})
				if err != nil {
					return nil, err
				}
				_, err = s.Shell(ctx, "true", time.Minute)
				return func() { s.Close() }, err
			})
		}},
		{name: fmt.Sprintf("an extra branch of the %d-file session (PSS)", forkTree), run: func() (float64, error) {
			bs, err := sessions["ns"].Fork(ctx, 1)
			if err != nil {
				return 0, err
			}
			defer bs[0].Close()
			if _, err := bs[0].Shell(ctx, "true", time.Minute); err != nil {
				return 0, err
			}
			time.Sleep(time.Second) // not ordering: idling is what is measured
			var pss float64
			for _, p := range descendants([]int{bs[0].GuestPID()}) {
				_, x := smaps(p)
				pss += x
			}
			return pss, nil
		}},
	}
	mem.note = "PSS of the guest's processes as the host sees them, after one exec_shell and a second idle (a branch: its own guest's, which was opened ahead of the fork). " +
		"A branch adds no copy of the workspace: its layers are the parent's. A fork family also keeps as many sessions opened ahead as its largest fork, each one idle session's guest."
	return []group{g, mem}, nil
}

// pssOf runs start (which makes one sandbox) and sums the PSS of the
// processes it added under this one, after a second idle; then ends it.
func pssOf(start func() (func(), error)) (float64, error) {
	before := children()
	end, err := start()
	if end != nil {
		defer end()
	}
	if err != nil {
		return 0, err
	}
	time.Sleep(time.Second) // not ordering: idling is what is measured
	var pss float64
	for _, p := range descendants(slices.DeleteFunc(children(), func(p int) bool { return slices.Contains(before, p) })) {
		_, x := smaps(p)
		pss += x
	}
	return pss, nil
}
