//go:build linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dryexec/dryexec/internal/procfs"
	"github.com/dryexec/dryexec/session"
)

// idleFor is how long a session sits idle before it is measured: long enough
// for its exec's leftovers to be reaped and freed.
const idleFor = 300 * time.Millisecond

// memoryGroup: what an idle ns session costs. Every sample opens a session,
// runs one exec_shell and one exec_python (so the processes a used session
// keeps are there), lets it idle, and measures: the RSS and PSS summed over
// every process of the session's sandbox (found as the descendants of the
// guest this process started), and this process's own RSS growth (the
// session's host side: goroutines, buffers, the cgroup and seccomp watchers),
// after a GC that returns freed memory to the OS. The baseline is what an
// agent keeps alive without a sandbox between commands: an idle shell.
func memoryGroup(e *env) ([]group, error) {
	g := group{key: "memory", title: fmt.Sprintf("Idle ns session memory (after one exec_shell and one exec_python, %s idle)", idleFor),
		unit: unitMiB, bases: []int{0}}
	// A sample measures three things at once; the three candidates share it,
	// each taking one value. The first (the baseline) runs first in a round,
	// so the session sample is taken by the second and read by the others.
	var last struct{ rss, pss, host float64 }
	var procs []string
	// idle measures one session: opened with opt, one exec_shell, and one
	// exec_python if python; its PSS alone (the other figures are sample's).
	idle := func(opt session.Options, python bool) (float64, error) {
		before := children()
		s, err := session.Open(e.ctx, opt)
		if err != nil {
			return 0, err
		}
		defer s.Close()
		if r, err := s.Shell(e.ctx, "true", time.Minute); err != nil || r.ExitCode != 0 {
			return 0, fmt.Errorf("exec_shell: %v %+v", err, r)
		}
		if python {
			if r, err := s.Python(e.ctx, "1+1", nil, time.Minute); err != nil || !r.OK {
				return 0, fmt.Errorf("exec_python: %v %+v", err, r)
			}
		}
		time.Sleep(idleFor) // not ordering: letting the session idle is what is measured
		var pss float64
		for _, p := range descendants(slices.DeleteFunc(children(), func(p int) bool { return slices.Contains(before, p) })) {
			_, x := smaps(p)
			pss += x
		}
		return pss, nil
	}
	sample := func() (float64, error) {
		before := children()
		hostBefore := selfRSS()
		s, err := session.Open(e.ctx, session.Options{Rung: "ns"})
		if err != nil {
			return 0, err
		}
		defer s.Close()
		if r, err := s.Shell(e.ctx, "true", time.Minute); err != nil || r.ExitCode != 0 {
			return 0, fmt.Errorf("exec_shell: %v %+v", err, r)
		}
		if r, err := s.Python(e.ctx, "1+1", nil, time.Minute); err != nil || !r.OK {
			return 0, fmt.Errorf("exec_python: %v %+v", err, r)
		}
		time.Sleep(idleFor)
		var guests []int
		for _, p := range children() {
			if !slices.Contains(before, p) {
				guests = append(guests, p)
			}
		}
		if len(guests) == 0 {
			return 0, fmt.Errorf("no new child process after opening a session")
		}
		last.rss, last.pss, procs = 0, 0, nil
		for _, p := range descendants(guests) {
			rss, pss := smaps(p)
			last.rss += rss
			last.pss += pss
			procs = append(procs, comm(p))
		}
		last.host = selfRSS() - hostBefore
		return last.rss, nil
	}
	bare := func() (float64, error) {
		c := exec.Command("sh")
		in, err := c.StdinPipe()
		if err != nil {
			return 0, err
		}
		if err := c.Start(); err != nil {
			return 0, err
		}
		defer c.Wait()
		defer in.Close()
		time.Sleep(idleFor)
		rss, _ := smaps(c.Process.Pid)
		return rss, nil
	}
	g.cands = []candidate{
		{name: "bare idle sh (RSS; no sandbox)", label: "bare sh", run: bare},
		{name: "session guest: RSS summed over its processes", run: sample},
		{name: "session guest: PSS summed (shared pages divided among sharers)", run: func() (float64, error) { return last.pss, nil }},
		{name: "session host side: this process's RSS growth per session", run: func() (float64, error) { return last.host, nil }},
		// A session that has not run Python keeps no interpreter (the runner
		// starts with the first exec_python); PythonWarm keeps one from the
		// start, as every session did before.
		{name: "session guest PSS, exec_shell only (no Python yet)", run: func() (float64, error) { return idle(session.Options{Rung: "ns"}, false) }},
		{name: "session guest PSS, exec_shell only, PythonWarm (the old default)", run: func() (float64, error) {
			return idle(session.Options{Rung: "ns", PythonWarm: true}, false)
		}},
	}
	g.note = "The guest's processes are found, not assumed: the sandbox's process tree as the host sees it. " +
		"The host side is the RSS this process gained while the session was open, after a GC: noisy, a median of small numbers."
	g.extra = func() string {
		return "Processes of the last session measured: " + strings.Join(procs, ", ") + "."
	}
	return []group{g}, nil
}

// children are the pids whose parent is this process.
func children() []int {
	var out []int
	for _, p := range allPids() {
		if ppid(p) == os.Getpid() {
			out = append(out, p)
		}
	}
	return out
}

// descendants are roots and every process beneath them.
func descendants(roots []int) []int {
	out := slices.Clone(roots)
	all := allPids()
	for i := 0; i < len(out); i++ {
		for _, p := range all {
			if ppid(p) == out[i] && !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
	}
	return out
}

func allPids() []int {
	ents, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range ents {
		if p, err := strconv.Atoi(e.Name()); err == nil {
			out = append(out, p)
		}
	}
	return out
}

// ppid reads the parent pid from /proc/PID/stat (after the command name in
// parentheses, which may itself hold spaces and parentheses).
func ppid(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return -1
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 2 {
		return -1
	}
	p, _ := strconv.Atoi(f[1])
	return p
}

func comm(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(b))
}

// smaps is a process's RSS and PSS in MiB.
func smaps(pid int) (rss, pss float64) {
	r, p := procfs.Rollup(pid)
	return float64(r) / (1 << 20), float64(p) / (1 << 20)
}

// selfRSS is this process's RSS in MiB after a GC has returned what it can.
func selfRSS() float64 {
	runtime.GC()
	debug.FreeOSMemory()
	kb, _ := procfs.FileField("/proc/self/status", "VmRSS:")
	return float64(kb) / 1024
}
