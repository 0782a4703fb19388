package linuxns

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/cgroup"
	"github.com/dryexec/dryexec/cgroup/cgrouptest"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/internal/testwait"
	"github.com/dryexec/dryexec/runner"
	"github.com/dryexec/dryexec/store"
)

// boundRung returns a Rung whose sandboxes' cgroups live inside a bound group
// of the test's own (512 MiB, 1024 tasks; cgrouptest.Bound), which also checks
// that nothing of this test is left in the host's cgroup tree.
func boundRung(t *testing.T) *Rung {
	t.Helper()
	return &Rung{Cgroups: cgrouptest.Bound(t, 512<<20, 1024)}
}

func runBounded(t *testing.T, r *Rung, dir string, spec dryexec.TrialSpec, script string) *dryexec.StateDelta {
	t.Helper()
	spec.Action = dryexec.Action{Argv: []string{"/bin/sh", "-c", script}, Cwd: dir, Env: testPath, TimeoutMS: spec.Action.TimeoutMS}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := r.Trial(ctx, spec)
	if err != nil {
		t.Fatalf("trial: %v", err)
	}
	validate(t, d)
	return d
}

func limitViolations(d *dryexec.StateDelta, want string) []dryexec.Violation {
	var out []dryexec.Violation
	for _, v := range d.Violations {
		if v.Kind == "limit" && strings.Contains(v.Detail, want) {
			out = append(out, v)
		}
	}
	return out
}

// TestBombsAreStoppedAndReported runs a real fork bomb, a memory bomb and a
// disk-fill bomb, each in a trial with small limits, under the test's bound
// group and the trial's own timeout: each is stopped, the delta names the
// limit, and the host has nothing left of it.
func TestBombsAreStoppedAndReported(t *testing.T) {
	requireNS(t)
	r := boundRung(t)
	tests := []struct {
		name   string
		spec   dryexec.TrialSpec
		script string
		want   string
	}{
		{"fork bomb", dryexec.TrialSpec{Limits: dryexec.Limits{Pids: 64}, Action: dryexec.Action{TimeoutMS: 3000}},
			`f() { f | f & }; f; sleep 10`, "pids limit 64 reached"},
		{"memory bomb", dryexec.TrialSpec{Limits: dryexec.Limits{MemoryBytes: 128 << 20}, Action: dryexec.Action{TimeoutMS: 30000}},
			`/usr/bin/python3 -c 'x=[]
while True: x.append(b"\1" * (1<<20))'; echo rc=$?`, "memory limit 134217728 bytes (128 MiB) reached"},
		{"disk bomb", dryexec.TrialSpec{UpperSizeBytes: 8 << 20, Action: dryexec.Action{TimeoutMS: 30000}},
			`while :; do cat /dev/zero > fill.$$ || break; done; echo full`, "upper storage full"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			d := runBounded(t, r, dir, tt.spec, tt.script)
			if len(limitViolations(d, tt.want)) != 1 {
				t.Fatalf("violations %+v, want one with %q (exit %d, stderr %.300q)", d.Violations, tt.want, d.Process.ExitCode, d.Process.Stderr)
			}
			if tt.name == "memory bomb" && (!strings.Contains(d.Process.Stdout, "rc=137") || d.Memory.PeakRSSBytes < 64<<20 || d.Process.PeakRSSBytes != d.Memory.PeakRSSBytes) {
				t.Errorf("memory bomb: stdout %q, peak %d / %d", d.Process.Stdout, d.Memory.PeakRSSBytes, d.Process.PeakRSSBytes)
			}
			if ents, _ := os.ReadDir(dir); len(ents) != 0 {
				t.Errorf("the host's dir got %d entries", len(ents))
			}
		})
	}
}

// TestNormalWorkHitsNoLimit: the defaults let ordinary work through (a few
// hundred processes, a 200 MiB allocation) without a violation, and the delta
// has the sandbox's peak memory from the cgroup.
func TestNormalWorkHitsNoLimit(t *testing.T) {
	requireNS(t)
	r := boundRung(t)
	d := runBounded(t, r, t.TempDir(), dryexec.TrialSpec{Action: dryexec.Action{TimeoutMS: 60000}},
		`i=0; while [ $i -lt 200 ]; do /bin/true & i=$((i+1)); done; wait
/usr/bin/python3 -c 'x = b"\1" * (200<<20); print(len(x))'`)
	limitWarned := slices.ContainsFunc(d.Warnings, func(w string) bool { return strings.Contains(w, "limit") })
	if len(d.Violations) != 0 || d.Process.ExitCode != 0 || limitWarned {
		t.Fatalf("violations %+v warnings %v exit %d stderr %q", d.Violations, d.Warnings, d.Process.ExitCode, d.Process.Stderr)
	}
	if d.Memory.PeakRSSBytes < 200<<20 {
		t.Errorf("peak %d bytes, want ≥ 200 MiB", d.Memory.PeakRSSBytes)
	}
}

// TestCgroupLimitsAreInForce reads the limits from inside: the command's own
// group (through the trial's cgroup files on the host) has them.
func TestCgroupLimitsAreInForce(t *testing.T) {
	requireNS(t)
	r := boundRung(t)
	lim, err := r.NewLimiter("tr_limits_"+strconv.Itoa(os.Getpid()), dryexec.Limits{MemoryBytes: 256 << 20, Pids: 100, CPUs: 0.5, CPUWeight: 50})
	if err != nil {
		t.Fatal(err)
	}
	defer lim.Close()
	// v1: until the supervisor's threads are sheltered, the pids limit has
	// cgroup.ShelterHeadroom on top.
	want := map[string]string{"memory.limit_in_bytes": "268435456", "pids.max": strconv.Itoa(100 + cgroup.ShelterHeadroom),
		"cpu.cfs_quota_us": "50000", "cpu.shares": "512"}
	found := 0
	for _, p := range lim.group.Paths() {
		for f, v := range want {
			b, err := os.ReadFile(filepath.Join(p, f))
			if err != nil {
				continue
			}
			found++
			if strings.TrimSpace(string(b)) != v {
				t.Errorf("%s/%s = %q, want %s", p, f, b, v)
			}
		}
	}
	if found != len(want) {
		t.Errorf("found %d of %d limit files", found, len(want))
	}
}

// TestKilledHostLeavesNothingAfterSweep: a host process SIGKILLed mid-trial
// leaves its group (the sandbox dies with it: Pdeathsig); the next start's
// store.Recover sweeps it away.
func TestKilledHostLeavesNothingAfterSweep(t *testing.T) {
	requireNS(t)
	boundRung(t)
	if os.Getenv("DRYEXEC_TEST_HOST_CHILD") != "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHostChild$", "-test.v")
	cmd.Env = append(os.Environ(), "DRYEXEC_TEST_HOST_CHILD=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	var got string
	for !strings.Contains(got, "TRIAL RUNNING") {
		n, err := out.Read(buf)
		if err != nil {
			t.Fatalf("child: %v (%s)", err, got)
		}
		got += string(buf[:n])
	}
	child := cmd.Process.Pid
	// The child's guest dies with it (Pdeathsig); wait for that, so that no
	// later test sees it.
	var guests []string
	if ents, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", child)); err == nil {
		for _, e := range ents {
			b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", child, e.Name()))
			guests = append(guests, strings.Fields(string(b))...)
		}
	}
	syscall.Kill(child, syscall.SIGKILL)
	cmd.Wait()
	for _, g := range guests {
		for {
			b, err := os.ReadFile("/proc/" + g + "/stat")
			if err != nil || strings.Contains(string(b), ") Z ") {
				break
			}
			select {
			case <-ctx.Done():
				t.Fatalf("the killed host's guest %s lives on", g)
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
	var left []string
	for _, p := range cgroup.Leftovers() {
		if strings.Contains(p, "."+strconv.Itoa(child)+"-") {
			left = append(left, p)
		}
	}
	if len(left) == 0 {
		t.Fatal("the killed host left no group: the test proves nothing")
	}
	// The next start recovers (runner.Recover), which sweeps.
	st, err := store.Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := runner.Recover(st); err != nil {
		t.Fatal(err)
	}
	for _, p := range left {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s survived the sweep", p)
		}
	}
}

// TestHostChild is the host process TestKilledHostLeavesNothingAfterSweep kills.
func TestHostChild(t *testing.T) {
	if os.Getenv("DRYEXEC_TEST_HOST_CHILD") == "" {
		t.Skip("helper of TestKilledHostLeavesNothingAfterSweep")
	}
	r := &Rung{Trace: func(phase string) {
		if phase == "view" {
			fmt.Println("TRIAL RUNNING")
		}
	}}
	d, err := r.Trial(context.Background(), dryexec.TrialSpec{Action: dryexec.Action{
		Argv: []string{"/bin/sh", "-c", "sleep 60"}, Cwd: "/", Env: testPath}})
	t.Fatalf("the trial was supposed to be killed: %v %v", d, err)
}

// TestRlimitFallback (rootless; TestContainmentRootless runs it): where no
// cgroup can be made, the delta warns so and the sandbox's processes are still
// bounded, per sandbox, by RLIMIT_NPROC in its user namespace.
func TestRlimitFallback(t *testing.T) {
	requireNS(t)
	if os.Geteuid() == 0 {
		t.Skip("rootless only (TestContainmentRootless re-runs it as nobody)")
	}
	if _, err := (&Rung{}).NewLimiter("tr_probe", dryexec.Limits{}); err != nil {
		t.Fatal(err)
	}
	// A bounded loop: it cannot run away even if the limit did not hold.
	d := runTrial(t, t.TempDir(), dryexec.TrialSpec{Limits: dryexec.Limits{Pids: 16}, Action: dryexec.Action{TimeoutMS: 30000}},
		"/bin/sh", "-c", `ulimit -p; (i=0; while [ $i -lt 100 ]; do sleep 20 & i=$((i+1)); echo $i; done) 2>/dev/null`)
	if !slices.ContainsFunc(d.Warnings, func(w string) bool {
		return strings.Contains(w, "rlimits") && strings.Contains(w, "16 processes")
	}) {
		t.Fatalf("warnings %q", d.Warnings)
	}
	lines := strings.Fields(d.Process.Stdout)
	// The command's own limit is the one asked for; the guest keeps
	// guestThreads more for its threads (a bomb that took them all would
	// kill it: test/escape's fork_bomb, rootless).
	if len(lines) < 2 || lines[0] != "16" {
		t.Fatalf("stdout %q, want the rlimit and a count (stderr %q)", d.Process.Stdout, d.Process.Stderr)
	}
	if n, _ := strconv.Atoi(lines[len(lines)-1]); n >= 100 || n == 0 {
		t.Errorf("%d processes ran, want fewer than the 100 asked for", n)
	}
	if len(d.Violations) != 0 {
		t.Errorf("violations %+v: the fallback cannot see hits", d.Violations)
	}
}

// BenchmarkTrialContainment is a /bin/true trial with this host's default
// masks and limits, against the same trial without masks (the cgroup is made
// either way; cgroup.BenchmarkGroupLifecycle has its share).
func BenchmarkTrialContainment(b *testing.B) {
	testreq.Need(b, testreq.NS, (&Rung{}).Available(context.Background()))
	dir := b.TempDir()
	for _, bc := range []struct {
		name string
		spec dryexec.TrialSpec
	}{
		{"default", dryexec.TrialSpec{}},
		{"no-masks", dryexec.TrialSpec{NoDefaultMasks: true}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			r := &Rung{}
			for b.Loop() {
				spec := bc.spec
				spec.Action = dryexec.Action{Argv: []string{"/bin/true"}, Cwd: dir, Env: testPath}
				if _, err := r.Trial(context.Background(), spec); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestCommandInTrialGroup: the command must start inside the trial's group,
// never the caller's, cold and pooled. On a cgroup v1 host the guest is born
// in its shelter and its launcher enters the group itself; elsewhere the
// guest joins in the background while it builds the view (the cold trial's
// join is held back until well after the view is built, so only the host's
// wait for it keeps the command inside). What the host sees of the running
// command decides, not what the command is shown: its own groups read "/",
// the root of a cgroup namespace of its own.
func TestCommandInTrialGroup(t *testing.T) {
	requireNS(t)
	testreq.NeedRoot(t)
	dir := t.TempDir()
	// A pooled sandbox's group is named by the id it was prepared under.
	group := regexp.MustCompile(`/dryexec/(tr_[a-z0-9]+)\.[0-9]+-[0-9]+/run$`)
	// run runs a command that waits on its stdin, finds it on the host by
	// a marker in its argv, checks its groups there, then lets it end.
	run := func(t *testing.T, trial func(dryexec.TrialSpec) (*dryexec.StateDelta, error)) {
		t.Helper()
		marker := "dryexec-cgroup-check-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
		stdinR, stdinW := io.Pipe()
		type result struct {
			d   *dryexec.StateDelta
			err error
		}
		done := make(chan result, 1)
		go func() {
			d, err := trial(dryexec.TrialSpec{Stdin: stdinR, Action: dryexec.Action{
				Argv: []string{"sh", "-c", "cat /proc/self/cgroup; read x", marker}, Cwd: dir, Env: testPath}})
			done <- result{d, err}
		}()
		var host string
		testwait.For(t, time.Minute, "the command running on the host", func() bool {
			host = groupsOfMarked(marker)
			return host != ""
		})
		stdinW.Close()
		res := <-done
		if res.err != nil {
			t.Fatal(res.err)
		}
		lines := 0
		for _, l := range strings.Split(strings.TrimSpace(host), "\n") {
			// hierarchy-ID:controllers:path; the trial's own (pids, memory)
			// end in <trial id>.<owner>/run.
			parts := strings.SplitN(l, ":", 3)
			if len(parts) != 3 || !(strings.Contains(parts[1], "pids") || strings.Contains(parts[1], "memory")) {
				continue
			}
			lines++
			if m := group.FindStringSubmatch(parts[2]); m == nil {
				t.Errorf("the command ran in %q, not in a trial's group", l)
			}
		}
		if lines == 0 {
			t.Errorf("no pids or memory line in the command's groups %q", host)
		}
		for _, l := range strings.Split(strings.TrimSpace(res.d.Process.Stdout), "\n") {
			if parts := strings.SplitN(l, ":", 3); len(parts) == 3 && parts[2] != "/" {
				t.Errorf("the command sees its group as %q, want / (the root of its cgroup namespace)", l)
			}
		}
	}
	t.Run("cold", func(t *testing.T) {
		r := &Rung{}
		setAttachDelay(t, r, 300*time.Millisecond)
		run(t, func(spec dryexec.TrialSpec) (*dryexec.StateDelta, error) { return r.Trial(t.Context(), spec) })
	})
	t.Run("pooled", func(t *testing.T) {
		p := newTestPool(t, dir, PoolOptions{Size: 1}, 1)
		// A mount made meanwhile by another package's test makes the
		// ready sandbox stale (the trial then runs cold): try again.
		for range 5 {
			waitReady(t, p, 1)
			before := p.Stats().Hits
			run(t, func(spec dryexec.TrialSpec) (*dryexec.StateDelta, error) { return p.Trial(t.Context(), spec) })
			if p.Stats().Hits == before+1 {
				return
			}
		}
		t.Fatalf("no trial took a pooled sandbox: %+v", p.Stats())
	})
}

// groupsOfMarked is /proc/PID/cgroup, as this process sees it, of the
// process with marker among its arguments; "" while there is none.
func groupsOfMarked(marker string) string {
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil || !slices.Contains(strings.Split(string(b), "\x00"), marker) {
			continue
		}
		if g, err := os.ReadFile("/proc/" + e.Name() + "/cgroup"); err == nil {
			return string(g)
		}
	}
	return ""
}

// TestShelterKeepsOnlyTheLauncher: once a sandbox is ready (here a
// prestarted one, waiting for its command), the guest's launcher thread,
// the one that starts the command, is the only thread of the guest left
// under the v1 pids limit, which is down to the limit asked for: every
// other thread of the guest is in the shelter, and the command's forks
// count against the limit from its first one.
func TestShelterKeepsOnlyTheLauncher(t *testing.T) {
	requireNS(t)
	r := boundRung(t)
	spec := dryexec.TrialSpec{TrialID: dryexec.NewTrialID(), Limits: dryexec.Limits{Pids: 64},
		Action: dryexec.Action{Argv: []string{"true"}, Cwd: t.TempDir(), Env: testPath}}
	p := r.Prestart(context.Background(), spec).(*Prestarted)
	t.Cleanup(func() { p.Close() })
	testwait.For(t, time.Minute, "the prestarted sandbox ready", func() bool { return p.Stats().Ready == 1 })
	p.mu.Lock()
	tr := p.t
	p.mu.Unlock()
	if tr == nil || tr.lim.group == nil {
		t.Fatal("the sandbox was prepared without a cgroup")
	}
	// Each thread's group in the v1 pids hierarchy, and which one is
	// confined (the launcher: the guest confines that thread alone).
	pid := strconv.Itoa(tr.cmd.Process.Pid)
	ents, err := os.ReadDir("/proc/" + pid + "/task")
	if err != nil {
		t.Fatal(err)
	}
	var launchers, others []string
	for _, e := range ents {
		task := "/proc/" + pid + "/task/" + e.Name()
		status, err1 := os.ReadFile(task + "/status")
		groups, err2 := os.ReadFile(task + "/cgroup")
		if err1 != nil || err2 != nil {
			continue // a thread that ended meanwhile
		}
		for _, l := range strings.Split(string(groups), "\n") {
			f := strings.SplitN(l, ":", 3)
			if len(f) != 3 || !slices.Contains(strings.Split(f[1], ","), "pids") {
				continue
			}
			if strings.Contains(string(status), "\nSeccomp:\t2\n") {
				launchers = append(launchers, f[2])
			} else {
				others = append(others, f[2])
			}
		}
	}
	if len(launchers)+len(others) == 0 {
		testreq.Needf(t, testreq.Kernel, "cgroup v1 pids", errors.New("no v1 pids hierarchy: nothing is sheltered"))
	}
	if len(launchers) != 1 || len(others) == 0 {
		t.Fatalf("launcher threads in %q, the guest's other threads in %q: want one launcher and some others", launchers, others)
	}
	pidsDir := ""
	for _, d := range tr.lim.group.Paths() {
		if _, err := os.Stat(filepath.Join(d, "pids.max")); err == nil && filepath.Base(launchers[0]) == "run" && strings.HasSuffix(d, filepath.Dir(launchers[0])) {
			pidsDir = d
		}
	}
	if pidsDir == "" {
		t.Fatalf("the launcher thread is in pids group %q, not in the trial's run group (%q)", launchers[0], tr.lim.group.Paths())
	}
	if b, _ := os.ReadFile(filepath.Join(pidsDir, "pids.max")); strings.TrimSpace(string(b)) != "64" {
		t.Errorf("pids.max %q once the sandbox is ready, want the 64 asked for", b)
	}
	for _, g := range others {
		if strings.HasSuffix(pidsDir, filepath.Dir(g)) || !strings.Contains(filepath.Base(g), "-guest") {
			t.Errorf("a guest thread is in pids group %q, want the shelter", g)
		}
	}
}

// TestGuestOutOfOOMReach: a command makes the guest the OOM killer's first
// choice (oom_score_adj 1000 through /proc/1, which is its uid's file) and
// then fills the trial's memory limit. The kernel must kill the command's
// process, not the guest: the delta is complete (the shell went on after
// the kill), and the limit is reported. Before, the guest died and the
// trial was blocked as incomplete.
func TestGuestOutOfOOMReach(t *testing.T) {
	requireNS(t)
	if !v1Memory(t) {
		testreq.Needf(t, testreq.Kernel, "cgroup v1 memory", errors.New("no v1 memory hierarchy: the guest cannot leave the trial's memory group (docs/limits.md)"))
	}
	r := boundRung(t)
	dir := t.TempDir()
	d := runBounded(t, r, dir, dryexec.TrialSpec{Limits: dryexec.Limits{MemoryBytes: 128 << 20}, Action: dryexec.Action{TimeoutMS: 60000}},
		`for t in /proc/1/task/*; do echo 1000 > $t/oom_score_adj || exit 9; done
echo adj=$(cat /proc/1/oom_score_adj)
echo before > before.txt
/usr/bin/python3 -c 'x=[]
while True: x.append(b"\1" * (1<<20))'; echo rc=$?
echo after > after.txt`)
	if !strings.Contains(d.Process.Stdout, "adj=1000") {
		t.Fatalf("the attack did not set the guest's oom_score_adj: exit %d, stdout %q, stderr %q", d.Process.ExitCode, d.Process.Stdout, d.Process.Stderr)
	}
	if d.Process.ExitCode != 0 || !strings.Contains(d.Process.Stdout, "rc=137") {
		t.Errorf("exit %d, stdout %q: want the shell to go on after its python was killed (warnings %v)", d.Process.ExitCode, d.Process.Stdout, d.Warnings)
	}
	if len(limitViolations(d, "memory limit 134217728 bytes (128 MiB) reached")) != 1 {
		t.Errorf("violations %+v, want the memory limit's", d.Violations)
	}
	for _, f := range []string{"before.txt", "after.txt"} {
		p := filepath.Join(dir, f)
		if !slices.ContainsFunc(d.Files, func(c dryexec.FileChange) bool { return c.Path == p }) {
			t.Errorf("the delta lacks %s", p)
		}
	}
}

// v1Memory says whether this host has a cgroup v1 memory hierarchy.
func v1Memory(t *testing.T) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.SplitN(l, ":", 3); len(f) == 3 && slices.Contains(strings.Split(f[1], ","), "memory") {
			return true
		}
	}
	return false
}
