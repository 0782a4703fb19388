package cgroup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/internal/testwait"
)

// boundGroup makes a v1/v2 group of the test's own, holding the dryexec parent,
// with hard limits of its own: should our limits not apply, a bomb stops there
// instead of taking the machine down. It returns the Options.Parent to use.
func boundGroup(t testing.TB) Options {
	t.Helper()
	testreq.NeedRoot(t)
	m, err := NewManager(Options{})
	if err != nil {
		testreq.Needf(t, testreq.Kernel, "cgroups", err)
	}
	own, err := ownGroups()
	if err != nil {
		t.Fatal(err)
	}
	name := "dryexec-test-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	var made []string
	for _, h := range m.hier {
		key := ""
		if !h.v2 {
			key = h.ctrls[0]
		}
		base := own[key]
		if h.v2 {
			base = filepath.Dir(base)
		}
		d := filepath.Join(h.mount, base, name)
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
		made = append(made, d)
		os.WriteFile(filepath.Join(d, "memory.limit_in_bytes"), []byte("536870912"), 0)
		os.WriteFile(filepath.Join(d, "memory.max"), []byte("536870912"), 0)
		os.WriteFile(filepath.Join(d, "pids.max"), []byte("512"), 0)
	}
	t.Cleanup(func() {
		for _, d := range made {
			if err := removeDir(d, false); err != nil {
				t.Errorf("removing the test's bound group: %v", err)
			}
		}
		// A hybrid host's v2 tree gets the same path (sandboxes are placed
		// there too, without limits): remove what was made in it.
		if own[""] != "" {
			d := filepath.Join("/sys/fs/cgroup/unified", filepath.Dir(own[""]), name)
			os.Remove(filepath.Join(d, ParentName))
			os.Remove(d)
		}
	})
	return Options{Parent: name + "/" + ParentName}
}

// startGated starts sh -c script in g, holding it until it is attached.
func startGated(t *testing.T, ctx context.Context, g *Group, script string) *exec.Cmd {
	t.Helper()
	return startAttached(t, ctx, g.Attach, script)
}

// startAttached starts sh -c script, holding it until attach has put it
// where it must run.
func startAttached(t *testing.T, ctx context.Context, attach func(pid int) error, script string) *exec.Cmd {
	t.Helper()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", "read _; "+script)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := attach(cmd.Process.Pid); err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatal(err)
	}
	in.Write([]byte("go\n"))
	in.Close()
	return cmd
}

func TestLimitsAreHitAndReported(t *testing.T) {
	opt := boundGroup(t)
	m, err := NewManager(opt)
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name   string
		limits dryexec.Limits
		script string
		want   string // substring of the violation
		check  func(Stats) bool
	}{
		{"pids: forks refused", dryexec.Limits{Pids: 16},
			`i=0; while [ $i -lt 64 ]; do sleep 30 & i=$((i+1)); done; wait`,
			"pids limit 16 reached", func(s Stats) bool { return s.PidsRefused > 0 }},
		{"memory: OOM kill", dryexec.Limits{MemoryBytes: 64 << 20},
			`exec /usr/bin/python3 -c 'x=[]
while True: x.append(b"\1" * (1<<20))'`,
			"memory limit 67108864 bytes (64 MiB) reached", func(s Stats) bool { return s.OOMKills > 0 && s.PeakMemBytes >= 32<<20 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			g, warnings, err := m.New("tr_test_"+strings.ReplaceAll(tt.name[:4], ":", ""), tt.limits)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Remove()
			for _, w := range warnings {
				t.Log(w)
			}
			// A stand-in supervisor: sheltering it lowers the v1 pids limit
			// from its start-up headroom to the limit asked for.
			sup := exec.CommandContext(ctx, "sleep", "60")
			if err := sup.Start(); err != nil {
				t.Fatal(err)
			}
			defer sup.Wait()
			defer sup.Process.Kill()
			if err := g.ShelterThreads(sup.Process.Pid, 0); err != nil {
				t.Fatal(err)
			}
			before := g.Stats()
			cmd := startGated(t, ctx, g, tt.script)
			cmd.Wait()
			s := g.Stats()
			if !tt.check(s) {
				t.Fatalf("stats %+v do not show the limit hit", s)
			}
			v := Violations(g.Limits(), g.PidsHeadroom(), before, s)
			if len(v) == 0 || v[0].Kind != "limit" || !strings.Contains(v[0].Detail, tt.want) {
				t.Fatalf("violations %+v, want one containing %q", v, tt.want)
			}
			paths := g.Paths()
			if err := g.Remove(); err != nil {
				t.Fatal(err)
			}
			for _, p := range paths {
				if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("%s still exists after Remove: %v", p, err)
				}
			}
		})
	}
}

// TestSweepRemovesOrphans: a group whose creator is dead (a killed daemon) is
// killed and removed by the next Sweep; a live creator's group is left alone.
func TestSweepRemovesOrphans(t *testing.T) {
	opt := boundGroup(t)
	m, err := NewManager(opt)
	if err != nil {
		t.Fatal(err)
	}
	live, _, err := m.New("tr_live", dryexec.Limits{Pids: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer live.Remove()
	// An orphan: a group named for a process that has exited, with a process
	// still inside it.
	dead := exec.Command("/bin/true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	orphan := &Manager{hier: m.hier, memTotal: m.memTotal, owner: "." + strconv.Itoa(dead.Process.Pid) + "-1"}
	g, _, err := orphan.New("tr_orphan", dryexec.Limits{Pids: 64})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sleeper := startGated(t, ctx, g, "exec sleep 60")
	done := make(chan error, 1)
	go func() { done <- sleeper.Wait() }()
	n, err := Sweep()
	if err != nil {
		t.Fatal(err)
	}
	if n < 1 {
		t.Fatalf("Sweep removed %d groups, want the orphan", n)
	}
	select {
	case <-done:
	case <-ctx.Done():
		t.Fatal("the orphan's process survived the sweep")
	}
	for _, p := range g.Paths() {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("orphan %s survived the sweep", p)
		}
	}
	for _, p := range live.Paths() {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("the sweep removed a live process's group %s", p)
		}
	}
}

func TestV2GroupOnHybridHost(t *testing.T) {
	testreq.NeedRoot(t)
	if _, err := os.Stat("/sys/fs/cgroup/unified/cgroup.procs"); err != nil {
		testreq.Needf(t, testreq.Kernel, "cgroup hybrid v2 tree", err)
	}
	m, err := NewManager(Options{V2Mount: "/sys/fs/cgroup/unified"})
	if err != nil {
		t.Fatal(err)
	}
	g, warnings, err := m.New("tr_v2", dryexec.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Remove()
	t.Logf("warnings: %v", warnings)
	if g.CgroupFD() < 0 {
		t.Fatal("a v2 group has no fd for CLONE_INTO_CGROUP")
	}
	cmd := exec.Command("/bin/sh", "-c", "cat /proc/self/cgroup; sleep 60")
	cmd.SysProcAttr = &syscall.SysProcAttr{UseCgroupFD: true, CgroupFD: g.CgroupFD()}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	n, _ := out.Read(buf)
	if !strings.Contains(string(buf[:n]), "0::/"+filepath.Base(filepath.Dir(g.Paths()[0]))+"/") && !strings.Contains(string(buf[:n]), "/"+ParentName+"/tr_v2.") {
		t.Errorf("the child is not in the group: %s", buf[:n])
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	<-done
}

func TestLeftovers(t *testing.T) {
	for _, p := range Leftovers() {
		if strings.Contains(p, "."+strconv.Itoa(os.Getpid())+"-") {
			t.Errorf("this test process left %s behind", p)
		}
	}
}

// TestSweepSparesLiveShelters: a live process's shelter group (the
// supervisor's threads) is not an orphan; a sweep by anyone must not kill it.
func TestSweepSparesLiveShelters(t *testing.T) {
	opt := boundGroup(t)
	m, err := NewManager(opt)
	if err != nil {
		t.Fatal(err)
	}
	g, _, err := m.New("tr_shelter", dryexec.Limits{Pids: 64})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Remove()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sup := exec.CommandContext(ctx, "sleep", "60")
	if err := sup.Start(); err != nil {
		t.Fatal(err)
	}
	defer sup.Wait()
	defer sup.Process.Kill()
	if err := g.ShelterThreads(sup.Process.Pid, 0); err != nil {
		t.Fatal(err)
	}
	if len(g.sheltered) == 0 {
		testreq.Needf(t, testreq.Kernel, "cgroup v1 pids", errors.New("no v1 pids hierarchy: nothing is sheltered"))
	}
	if _, err := Sweep(); err != nil {
		t.Fatal(err)
	}
	if err := sup.Process.Signal(syscall.Signal(0)); err != nil {
		t.Fatalf("the sweep killed a live supervisor: %v", err)
	}
	for _, d := range g.sheltered {
		if _, err := os.Stat(d); err != nil {
			t.Errorf("the sweep removed a live shelter %s", d)
		}
	}
}

// TestLimitsAreAboveTheNamespaceRoot: a process of the group that makes a
// cgroup namespace and mounts of its own (what a sandbox would need to reach
// its limits) finds its run group as the root, not the limited group, and not
// the host's tree: raising "its" pids.max changes nothing, and the limit holds.
func TestLimitsAreAboveTheNamespaceRoot(t *testing.T) {
	opt := boundGroup(t)
	m, err := NewManager(opt)
	if err != nil {
		t.Fatal(err)
	}
	g, _, err := m.New("tr_nsroot", dryexec.Limits{Pids: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Remove()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	sup := exec.CommandContext(ctx, "sleep", "60")
	if err := sup.Start(); err != nil {
		t.Fatal(err)
	}
	defer sup.Wait()
	defer sup.Process.Kill()
	if err := g.ShelterThreads(sup.Process.Pid, 0); err != nil {
		t.Fatal(err)
	}
	d1, d2 := t.TempDir(), t.TempDir()
	script := `unshare -C -m sh -c '
mount -t cgroup -o pids none ` + d1 + ` && { echo "v1 root limit: $(cat ` + d1 + `/pids.max)"; echo max > ` + d1 + `/pids.max; }
if mount -t cgroup2 none ` + d2 + ` 2>/dev/null; then echo "v2 groups: $(find ` + d2 + ` -mindepth 1 -maxdepth 1 -type d | wc -l)"; fi
i=0; while [ $i -lt 64 ]; do sleep 1 & i=$((i+1)); done 2>/dev/null; wait'`
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", "read _; "+script)
	// As the rung starts a guest: cloned into the group's v2 run group, and
	// attached to the v1 ones.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, UseCgroupFD: g.CgroupFD() >= 0, CgroupFD: g.CgroupFD()}
	in, _ := cmd.StdinPipe()
	var out strings.Builder
	cmd.Stdout = &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if err := g.Attach(cmd.Process.Pid); err != nil {
		t.Fatal(err)
	}
	in.Write([]byte("go\n"))
	in.Close()
	cmd.Wait()
	t.Logf("%s", out.String())
	if !strings.Contains(out.String(), "v1 root limit: max") {
		t.Errorf("the namespace's v1 root is not the unlimited run group: %q", out.String())
	}
	if strings.Contains(out.String(), "v2 groups:") && !strings.Contains(out.String(), "v2 groups: 0") {
		t.Errorf("the namespace's v2 root shows other groups: %q", out.String())
	}
	if s := g.Stats(); s.PidsRefused == 0 {
		t.Errorf("the pids limit did not hold after the attempt to raise it: %+v", s)
	}
	b, _ := os.ReadFile(filepath.Join(g.Paths()[slices.IndexFunc(g.m.hier, func(h hierarchy) bool { return slices.Contains(h.ctrls, "pids") })], "pids.max"))
	if strings.TrimSpace(string(b)) != "16" {
		t.Errorf("the group's pids.max is now %q", b)
	}
}

// BenchmarkGroupLifecycle is what limits add to each trial: make a group in
// every hierarchy with the defaults, then remove it.
func BenchmarkGroupLifecycle(b *testing.B) {
	testreq.NeedRoot(b)
	m, err := NewManager(Options{})
	if err != nil {
		testreq.Needf(b, testreq.Kernel, "cgroups", err)
	}
	for i := 0; b.Loop(); i++ {
		g, _, err := m.New("tr_bench"+strconv.Itoa(i), dryexec.Limits{})
		if err != nil {
			b.Fatal(err)
		}
		if err := g.Remove(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkSweep is what the first trial of a process (and every store
// open) pays to look for orphans.
func BenchmarkSweep(b *testing.B) {
	for b.Loop() {
		if _, err := Sweep(); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkStats is what reading a group's counters costs after each trial
// (linuxns Limiter.Violations), on the critical path of a warm trial.
func BenchmarkStats(b *testing.B) {
	opt := boundGroup(b)
	m, err := NewManager(opt)
	if err != nil {
		b.Fatal(err)
	}
	g, _, err := m.New("tr_stats", dryexec.Limits{})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Remove()
	g.Stats() // the first call may open what later ones reuse
	for b.Loop() {
		g.Stats()
	}
}

// TestSpawnSheltered: a process started under SpawnSheltered is born in the
// group's shelter on the pids and memory hierarchies and in the group on the
// others, without being moved; a thread that writes "0" to LauncherTasks'
// files enters the group alone, and what it starts is born inside; the pids
// limit has no headroom; and no thread of this process is left in any of
// the groups.
func TestSpawnSheltered(t *testing.T) {
	opt := boundGroup(t)
	m, err := NewManager(opt)
	if err != nil {
		t.Fatal(err)
	}
	g, _, err := m.New("tr_born", dryexec.Limits{Pids: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Remove()
	tasks, err := g.LauncherTasks()
	if err != nil {
		t.Fatal(err)
	}
	if len(tasks) == 0 {
		if err := g.SpawnSheltered(func() error { return nil }); !errors.Is(err, ErrNoV1) {
			t.Fatalf("SpawnSheltered on a host without v1 pids or memory: %v, want ErrNoV1", err)
		}
		testreq.Needf(t, testreq.Kernel, "cgroup v1 pids or memory", errors.New("no v1 hierarchy to shelter from"))
	}
	// The child moves its own (only) thread in through fd 3, 4, … and then
	// starts cat, which prints where it was born; it waits on stdin first
	// so that the test can look at it from here.
	script := `read x; for fd in $(seq 3 ` + strconv.Itoa(2+len(tasks)) + `); do echo 0 >&$fd || exit 9; done; cat /proc/self/cgroup`
	cmd := exec.Command("sh", "-c", script)
	cmd.ExtraFiles = tasks
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	cmd.Stdout = &out
	if err := g.SpawnSheltered(cmd.Start); err != nil {
		t.Fatal(err)
	}
	for _, f := range tasks {
		f.Close()
	}
	born, err := parseGroups("/proc/" + strconv.Itoa(cmd.Process.Pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("the child could not enter the group: %v", err)
	}
	inside := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) == 3 {
			for _, c := range strings.Split(f[1], ",") {
				inside[c] = f[2]
			}
		}
	}
	for i, h := range m.hier {
		if h.v2 {
			continue
		}
		c := h.ctrls[0]
		run := strings.TrimPrefix(g.runs[i], h.mount)
		if sheltersFrom(h) {
			if !strings.HasSuffix(born[c], "tr_born-guest"+m.owner) {
				t.Errorf("%s: born in %q, want the shelter", c, born[c])
			}
			if inside[c] != run {
				t.Errorf("%s: what the launcher started is in %q, want %q", c, inside[c], run)
			}
		} else if born[c] != run {
			t.Errorf("%s: born in %q, want %q", c, born[c], run)
		}
	}
	if g.PidsHeadroom() != 0 {
		t.Errorf("pids headroom %d after SpawnSheltered, want 0", g.PidsHeadroom())
	}
	// The spawning thread goes back after SpawnSheltered returned.
	testwait.For(t, 10*time.Second, "every thread of this process out of the trial's groups", func() bool {
		ents, err := os.ReadDir("/proc/self/task")
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range ents {
			if b, _ := os.ReadFile("/proc/self/task/" + e.Name() + "/cgroup"); strings.Contains(string(b), "tr_born") {
				return false
			}
		}
		return true
	})
}

// TestSpawnShelteredNeverMovesTheLeader: the thread that moves is never the
// process's leader, whose groups /proc/self/cgroup shows and NewManager
// places new groups beneath: a group made while the leader stood in
// another trial's was made inside it, and that trial's teardown killed the
// other's sandbox (server.TestConcurrentTrials). Many spawns from a few
// goroutines at once, so that the leader is among the threads that run them.
func TestSpawnShelteredNeverMovesTheLeader(t *testing.T) {
	opt := boundGroup(t)
	m, err := NewManager(opt)
	if err != nil {
		t.Fatal(err)
	}
	g, _, err := m.New("tr_leader", dryexec.Limits{Pids: 16})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Remove()
	if tasks, err := g.LauncherTasks(); err != nil || len(tasks) == 0 {
		testreq.Needf(t, testreq.Kernel, "cgroup v1 pids or memory", fmt.Errorf("no v1 hierarchy to shelter from (%v)", err))
	} else {
		for _, f := range tasks {
			f.Close()
		}
	}
	var leaderMoved, shown atomic.Int64
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				err := g.SpawnSheltered(func() error {
					if unix.Gettid() == unix.Getpid() {
						leaderMoved.Add(1)
					}
					if b, _ := os.ReadFile("/proc/self/cgroup"); strings.Contains(string(b), "tr_leader") {
						shown.Add(1)
					}
					return nil
				})
				if err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := leaderMoved.Load(); n > 0 {
		t.Errorf("the leader thread moved into the group in %d of 400 spawns", n)
	}
	if n := shown.Load(); n > 0 {
		t.Errorf("/proc/self/cgroup showed the group in %d of 400 spawns", n)
	}
}
