package soak_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/rung/linuxns"
	"github.com/dryexec/dryexec/server"
	"github.com/dryexec/dryexec/test/soak/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }

// size is how much work a run does: the short version by default (part of
// `go test ./...`), the full one with DRYEXEC_SOAK=full (`make soak`);
// DRYEXEC_SOAK_TRIALS and DRYEXEC_SOAK_SESSIONS override either.
func size(t *testing.T) (trials, sessions int, full bool) {
	trials, sessions = 60, 6
	if full = os.Getenv("DRYEXEC_SOAK") == "full"; full {
		trials, sessions = 1000, 100
	}
	for _, v := range []struct {
		env string
		n   *int
	}{{"DRYEXEC_SOAK_TRIALS", &trials}, {"DRYEXEC_SOAK_SESSIONS", &sessions}} {
		if s := os.Getenv(v.env); s != "" {
			n, err := strconv.Atoi(s)
			if err != nil || n < 0 {
				t.Fatalf("%s=%q: want a count", v.env, s)
			}
			*v.n = n
		}
	}
	return trials, sessions, full
}

// concurrency is how many jobs run at once (the "2 at a time").
const concurrency = 2

// mockDoc is the network mock file trials of kind "mock" run with.
const mockDoc = `{"routes": [{"host": "api.example.com", "method": "GET", "path": "/users/{id}", "status": 200, "json": {"name": "Ada"}}]}`

// soak is one run's fixture: the daemon, the host dirs trials work in, and
// the counters the figures are made of.
type soak struct {
	d          *harness.Daemon
	env        harness.Env
	wd         string // cwd of the trials that are not committed (seeded)
	commitRoot string // each committed trial works in a fresh dir under it
	mock       string

	trials, sessions, execs, commits, discards atomic.Int64
}

// TestSoak drives a real daemon through trials and sessions of mixed work,
// two at a time, then asserts that nothing leaked and that the daemon's
// memory stayed flat.
func TestSoak(t *testing.T) {
	testreq.NeedRoot(t)
	testreq.Need(t, testreq.NS, (&linuxns.Rung{}).Available(context.Background()))
	nTrials, nSessions, full := size(t)
	root := t.TempDir()
	e := harness.NewEnv(t, root)
	s := &soak{env: e, wd: filepath.Join(root, "work"), commitRoot: filepath.Join(root, "commits"), mock: filepath.Join(root, "mock.json")}
	for _, d := range []string{filepath.Join(s.wd, "seeddir", "sub"), s.commitRoot} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for p, c := range map[string]string{"seed.txt": "seed\n", "seeddir/a": "a\n", "seeddir/sub/b": "b\n"} {
		os.WriteFile(filepath.Join(s.wd, p), []byte(c), 0o644)
	}
	os.WriteFile(s.mock, []byte(mockDoc), 0o644)

	base := harness.TakeBaseline()
	s.d = harness.Start(t, e, filepath.Join(root, "d.sock"))
	pid := s.d.Pid

	jobs := plan(nTrials, nSessions)
	// Warm-up: the first jobs grow the daemon's heap, pools and caches to
	// their working size; memory and descriptors are measured after it.
	warm := max(10, len(jobs)/20)
	ctx := context.Background()
	s.run(t, ctx, jobs[:warm])
	if t.Failed() {
		t.FailNow()
	}
	s.d.HTTP.CloseIdleConnections()
	// The warm pool refills in the background after each trial: its
	// sandboxes (processes, cgroups) are counted once it is quiet.
	kids0, groups0 := settled(pid)
	rssStart, fdStart, thr0 := harness.RSS(pid), settledFDs(pid, -1), harness.Threads(pid)
	start, trials0 := time.Now(), s.trials.Load()
	s.run(t, ctx, jobs[warm:len(jobs)/2])
	rssMid := harness.RSS(pid)
	s.run(t, ctx, jobs[len(jobs)/2:])
	dur := time.Since(start)
	s.d.HTTP.CloseIdleConnections()
	fdEnd := settledFDs(pid, len(fdStart))
	rssEnd, thr1 := harness.RSS(pid), harness.Threads(pid)
	kids1, groups1 := settled(pid)
	measured := len(jobs) - warm

	t.Logf("soak: %d trials, %d sessions (%d execs), %d commits, %d discards, concurrency %d, in %v after a warm-up of %d jobs",
		s.trials.Load(), s.sessions.Load(), s.execs.Load(), s.commits.Load(), s.discards.Load(), concurrency, dur.Round(time.Millisecond), warm)
	t.Logf("soak: %.1f jobs/s over the %d measured jobs; %.1f trials/s (sessions ran between them)",
		float64(measured)/dur.Seconds(), measured, float64(s.trials.Load()-trials0)/dur.Seconds())
	t.Logf("soak: daemon RSS after warm-up %s, half-way %s, end %s (%+.1f MiB); fds %d → %d %v",
		mib(rssStart), mib(rssMid), mib(rssEnd), float64(rssEnd-rssStart)/(1<<20), len(fdStart), len(fdEnd), harness.FDKinds(fdEnd))
	t.Logf("soak: threads %d → %d; idle daemon's own sandboxes (warm pool): processes %d → %d, cgroup dirs %d → %d",
		thr0, thr1, len(kids0), len(kids1), len(groups0), len(groups1))
	if t.Failed() {
		t.Logf("daemon output:\n%s", tail(s.d.Output(), 4000))
		t.FailNow()
	}

	// The daemon is idle with no session open: nothing of any trial or
	// session may be left while it still runs. Its warm pool is all it may
	// hold, no more than after the warm-up…
	if len(kids1) > len(kids0) {
		t.Errorf("processes under the idle daemon grew from %d to %d:\n%s", len(kids0), len(kids1), describeAll(kids1))
	}
	if len(groups1) > len(groups0) {
		t.Errorf("the idle daemon's cgroups grew from %d to %d:\n%s", len(groups0), len(groups1), strings.Join(groups1, "\n"))
	}
	if l := harness.WaitGone(10*time.Second, func() []string { return leakList(e.Leaks(base, root, []int{pid}, pid)) }); len(l) > 0 {
		t.Errorf("leaked while the daemon runs:\n%s", strings.Join(l, "\n"))
	}
	if extra := newFDs(fdStart, fdEnd); len(fdEnd) > len(fdStart)+fdSlack {
		t.Errorf("daemon descriptors grew from %d to %d; new ones: %v", len(fdStart), len(fdEnd), extra)
	}
	if n := harness.FDKinds(fdEnd)["netns"]; n > 0 {
		t.Errorf("the idle daemon holds %d network namespaces open", n)
	}
	// RSS flat: a Go heap settles at a multiple of its live size, so growth
	// after warm-up is allowed a fixed slack plus a share of the start; a
	// per-trial leak of even a few KiB shows over the full soak's 1,000.
	if limit := rssStart + rssSlack(rssStart, full); rssEnd > limit {
		t.Errorf("daemon RSS grew from %s to %s (limit %s)", mib(rssStart), mib(rssEnd), mib(limit))
	}
	// …and nothing after it drained and exited.
	if err := s.d.Stop(time.Minute); err != nil {
		t.Fatal(err)
	}
	if l := harness.WaitGone(10*time.Second, func() []string { return leakList(e.Leaks(base, root, []int{pid})) }); len(l) > 0 {
		t.Errorf("leaked after the daemon exited:\n%s", strings.Join(l, "\n"))
	}
}

// settled waits (bounded) until the daemon's child processes and cgroups stop
// changing — the warm pool refilled — and returns them.
func settled(pid int) (kids []int, groups []string) {
	deadline := time.Now().Add(15 * time.Second)
	stable := 0
	for time.Now().Before(deadline) && stable < 5 {
		k, g := harness.Descendants(pid), harness.OwnedCgroups(pid)
		if len(k) == len(kids) && len(g) == len(groups) {
			stable++
		} else {
			stable = 0
		}
		kids, groups = k, g
		time.Sleep(100 * time.Millisecond)
	}
	return kids, groups
}

func describeAll(pids []int) string {
	var d []string
	for _, p := range pids {
		d = append(d, harness.Describe(p))
	}
	return strings.Join(d, "\n")
}

// fdSlack: descriptors the idle daemon may hold beyond the warm-up count
// (a listener's accepted connection not yet closed by the peer's close).
const fdSlack = 4

func rssSlack(start int64, full bool) int64 {
	if full {
		return 32<<20 + start/4
	}
	return 64<<20 + start/2
}

func leakList(l harness.Leaks) []string {
	if l.Empty() {
		return nil
	}
	return strings.Split(strings.TrimSpace(l.String()), "\n")
}

// settledFDs waits until the daemon's descriptor count stops changing (closing
// the client's connections reaches the daemon asynchronously), or is at most
// want, and returns them.
func settledFDs(pid, want int) map[int]string {
	deadline := time.Now().Add(5 * time.Second)
	prev := harness.FDs(pid)
	for time.Now().Before(deadline) {
		if want >= 0 && len(prev) <= want {
			return prev
		}
		time.Sleep(100 * time.Millisecond)
		cur := harness.FDs(pid)
		if want < 0 && len(cur) == len(prev) {
			return cur
		}
		prev = cur
	}
	return prev
}

func newFDs(before, after map[int]string) []string {
	var out []string
	for n, t := range after {
		if before[n] != t {
			out = append(out, fmt.Sprintf("%d→%s", n, t))
		}
	}
	slices.Sort(out)
	return out
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// job is one unit of work: a trial of some kind, or a whole session.
type job struct {
	kind string
	i    int
}

// trialKinds cycle through every trial; sessions are spread evenly among
// them.
var trialKinds = []string{"write", "delete", "netnone", "mock", "timeout", "fail", "background", "commit", "discard", "python"}

func plan(trials, sessions int) []job {
	var jobs []job
	every := 0
	if sessions > 0 {
		every = max(1, trials/sessions)
	}
	si := 0
	for i := 0; i < trials; i++ {
		jobs = append(jobs, job{trialKinds[i%len(trialKinds)], i})
		if every > 0 && i%every == every-1 && si < sessions {
			jobs = append(jobs, job{"session", si})
			si++
		}
	}
	for ; si < sessions; si++ {
		jobs = append(jobs, job{"session", si})
	}
	return jobs
}

// run does jobs, concurrency at a time; a failing job fails t and the run
// stops taking new jobs.
func (s *soak) run(t *testing.T, ctx context.Context, jobs []job) {
	ch := make(chan job)
	var wg sync.WaitGroup
	var failed atomic.Bool
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range ch {
				if failed.Load() {
					continue
				}
				var err error
				if j.kind == "session" {
					err = s.session(ctx, j.i)
				} else {
					err = s.trial(ctx, j)
				}
				if err != nil {
					failed.Store(true)
					t.Errorf("%s %d: %v", j.kind, j.i, err)
				}
			}
		}()
	}
	for _, j := range jobs {
		ch <- j
	}
	close(ch)
	wg.Wait()
}

// trial runs one trial of j's kind and checks its delta.
func (s *soak) trial(ctx context.Context, j job) error {
	i := strconv.Itoa(j.i)
	req := server.TrialRequest{Cwd: s.wd, Env: map[string]string{harness.MarkEnv: s.env.Mark, "I": i}}
	sh := func(script string) { req.Argv = []string{"/bin/sh", "-c", script} }
	var check func(d *dryexec.StateDelta) error
	switch j.kind {
	case "write":
		sh(`echo $I > w_$I.txt && mkdir d_$I && printf x > d_$I/y`)
		check = wantFiles(3, "create", "mkdir")
	case "delete":
		sh(`rm seed.txt && rm -r seeddir`)
		check = wantFiles(5, "delete", "rmdir")
	case "netnone":
		// Blocked: the name does not resolve (mode none answers DNS with
		// "blocked"), so curl fails; the attempt is logged.
		sh(`curl -sS -m 10 http://blocked.example.com/ ; echo rc=$?`)
		req.Net = []string{"none"}
		check = func(d *dryexec.StateDelta) error {
			if strings.Contains(d.Process.Stdout, "rc=0") || len(d.Network) == 0 {
				return fmt.Errorf("a blocked request got through or was not logged: %q %+v", d.Process.Stdout, d.Network)
			}
			return nil
		}
	case "mock":
		sh(`curl -sS -m 10 http://api.example.com/users/$I`)
		req.Net = []string{"mock:" + s.mock}
		check = func(d *dryexec.StateDelta) error {
			if !strings.Contains(d.Process.Stdout, `"Ada"`) || !slices.ContainsFunc(d.Network, func(n dryexec.NetworkEvent) bool { return n.Action == "mocked" }) {
				return fmt.Errorf("mocked request: stdout %q stderr %q network %+v", d.Process.Stdout, d.Process.Stderr, d.Network)
			}
			return nil
		}
	case "timeout":
		sh(`echo x > t_$I; sleep 60`)
		req.TimeoutMS = 300
		check = func(d *dryexec.StateDelta) error {
			if !d.Process.TimedOut || d.Process.ExitCode != 124 || len(d.Files) != 1 {
				return fmt.Errorf("timeout: %+v, %d files", d.Process, len(d.Files))
			}
			return nil
		}
	case "fail":
		sh(`echo oops >&2; exit 3`)
		req.NoStore = true
		check = func(d *dryexec.StateDelta) error {
			if d.Process.ExitCode != 3 || !strings.Contains(d.Process.Stderr, "oops") {
				return fmt.Errorf("failing command: %+v", d.Process)
			}
			return nil
		}
	case "background":
		// A daemonised sleeper must not outlive the trial.
		sh(`(setsid sleep 600 &) ; sleep 600 & echo bg > bg_$I`)
		check = wantFiles(1, "create")
	case "commit":
		dir := filepath.Join(s.commitRoot, "c"+i)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return err
		}
		req.Cwd = dir
		sh(`mkdir sub && echo $I > sub/f && echo top > t.txt`)
		check = func(d *dryexec.StateDelta) error {
			if err := wantFiles(3, "create", "mkdir")(d); err != nil {
				return err
			}
			var res struct {
				Applied []dryexec.FileChange `json:"applied"`
			}
			if err := s.d.Do(ctx, "POST", "/v1/trials/"+d.TrialID+"/commit", server.CommitRequest{}, &res); err != nil {
				return fmt.Errorf("commit: %w", err)
			}
			b, err := os.ReadFile(filepath.Join(dir, "sub", "f"))
			if err != nil || string(b) != i+"\n" || len(res.Applied) != 3 {
				return fmt.Errorf("after commit: %q %v, %d applied", b, err, len(res.Applied))
			}
			s.commits.Add(1)
			return nil
		}
	case "discard":
		sh(`echo gone > discard_$I`)
		check = func(d *dryexec.StateDelta) error {
			if err := s.d.Do(ctx, "POST", "/v1/trials/"+d.TrialID+"/discard", nil, nil); err != nil {
				return fmt.Errorf("discard: %w", err)
			}
			err := s.d.Do(ctx, "POST", "/v1/trials/"+d.TrialID+"/commit", server.CommitRequest{}, nil)
			if ae := (*harness.APIError)(nil); !errors.As(err, &ae) || ae.Code != "already_done" {
				return fmt.Errorf("commit after discard: %v, want already_done", err)
			}
			if _, err := os.Stat(filepath.Join(s.wd, "discard_"+i)); err == nil {
				return errors.New("a discarded trial reached the host")
			}
			s.discards.Add(1)
			return nil
		}
	case "python":
		req.Argv = []string{"/usr/bin/python3", "-c", "import os; open('p_' + os.environ['I'], 'w').write('x' * 100000)"}
		check = func(d *dryexec.StateDelta) error {
			if len(d.Files) != 1 || d.Files[0].Size != 100000 {
				return fmt.Errorf("python write: %+v %+v", d.Process, d.Files)
			}
			return nil
		}
	default:
		return fmt.Errorf("unknown kind %q", j.kind)
	}
	var d dryexec.StateDelta
	if err := s.d.Do(ctx, "POST", "/v1/trials", req, &d); err != nil {
		return err
	}
	s.trials.Add(1)
	if err := check(&d); err != nil {
		return fmt.Errorf("trial %s: %w", d.TrialID, err)
	}
	return nil
}

// wantFiles checks the delta has n changes, each of one of ops.
func wantFiles(n int, ops ...string) func(d *dryexec.StateDelta) error {
	return func(d *dryexec.StateDelta) error {
		ok := len(d.Files) == n && d.Process.ExitCode == 0
		for _, f := range d.Files {
			ok = ok && slices.Contains(ops, string(f.Op))
		}
		if !ok {
			var fs []string
			for _, f := range d.Files {
				fs = append(fs, string(f.Op)+" "+f.Path)
			}
			return fmt.Errorf("want %d changes (%v), exit 0; got exit %d stderr %q, %v", n, ops, d.Process.ExitCode, d.Process.Stderr, fs)
		}
		return nil
	}
}

type shellResult struct {
	ExitCode   int    `json:"exit_code"`
	TimedOut   bool   `json:"timed_out"`
	Transcript string `json:"transcript"`
	Cwd        string `json:"cwd"`
}

// session opens a session, runs a mix of execs in it, checks its diff, and
// closes it. Every fifth is a host-rung session (a temp dir on the host).
func (s *soak) session(ctx context.Context, i int) error {
	rungName := "ns"
	if i%5 == 4 {
		rungName = "host"
	}
	var info server.SessionInfo
	if err := s.d.Do(ctx, "POST", "/v1/sessions", server.SessionRequest{Rung: rungName, Env: map[string]string{harness.MarkEnv: s.env.Mark}}, &info); err != nil {
		return fmt.Errorf("open %s session: %w", rungName, err)
	}
	s.sessions.Add(1)
	p := "/v1/sessions/" + info.SessionID
	defer s.d.Do(context.WithoutCancel(ctx), "DELETE", p, nil, nil)
	shell := func(cmd string, timeoutMS int64) (shellResult, error) {
		var r shellResult
		err := s.d.Do(ctx, "POST", p+"/shell", map[string]any{"command": cmd, "timeout_ms": timeoutMS}, &r)
		s.execs.Add(1)
		return r, err
	}
	steps := []struct {
		cmd     string
		timeout int64
		want    func(r shellResult) bool
	}{
		{`echo hi > a.txt && mkdir d && echo x > d/b && cd d`, 0, func(r shellResult) bool { return r.ExitCode == 0 && strings.HasSuffix(r.Cwd, "/d") }},
		{`rm ../a.txt && pwd`, 0, func(r shellResult) bool { return r.ExitCode == 0 && strings.Contains(r.Transcript, "/d") }},
		{`echo no >&2; exit 7`, 0, func(r shellResult) bool { return r.ExitCode == 7 }},
		{`sleep 60`, 300, func(r shellResult) bool { return r.TimedOut && r.ExitCode == 124 }},
		{`sleep 600 & echo started`, 0, func(r shellResult) bool { return r.ExitCode == 0 }},
	}
	for _, st := range steps {
		r, err := shell(st.cmd, st.timeout)
		if err != nil {
			return fmt.Errorf("shell %q: %w", st.cmd, err)
		}
		if !st.want(r) {
			return fmt.Errorf("shell %q: %+v", st.cmd, r)
		}
	}
	var py struct {
		OK      bool                      `json:"ok"`
		Outputs map[string]map[string]any `json:"outputs"`
		Error   any                       `json:"error"`
	}
	if err := s.d.Do(ctx, "POST", p+"/python", map[string]any{"code": "y = 6 * 7\nopen('py.txt', 'w').write(str(y))"}, &py); err != nil {
		return fmt.Errorf("python: %w", err)
	}
	s.execs.Add(1)
	if !py.OK || fmt.Sprint(py.Outputs["y"]["json"]) != "42" {
		return fmt.Errorf("python: %+v", py)
	}
	var diff struct {
		Writes  map[string][]byte `json:"writes"`
		Deletes []string          `json:"deletes"`
	}
	if err := s.d.Do(ctx, "POST", p+"/diff", map[string]any{}, &diff); err != nil {
		return fmt.Errorf("diff: %w", err)
	}
	if string(diff.Writes["d/b"]) != "x\n" || string(diff.Writes["d/py.txt"]) != "42" || len(diff.Deletes) != 0 {
		return fmt.Errorf("diff: %d writes %v, deletes %v", len(diff.Writes), keys(diff.Writes), diff.Deletes)
	}
	if err := s.d.Do(ctx, "POST", p+"/reset", nil, nil); err != nil {
		return fmt.Errorf("reset: %w", err)
	}
	if err := s.d.Do(ctx, "DELETE", p, nil, nil); err != nil {
		return fmt.Errorf("close: %w", err)
	}
	return nil
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
