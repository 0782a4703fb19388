package cgroup

import (
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
)

// reread is Stats the straightforward way, independent of its fast path:
// every file read by path, v1 events summed over the whole tree of the group.
func reread(t *testing.T, g *Group) Stats {
	t.Helper()
	value := func(file, key string) int64 {
		b, err := os.ReadFile(file)
		if err != nil {
			return 0
		}
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if key == "" && len(f) == 1 || len(f) == 2 && f[0] == key {
				n, err := strconv.ParseInt(f[len(f)-1], 10, 64)
				if err != nil {
					t.Fatalf("%s: %q: %v", file, line, err)
				}
				return n
			}
		}
		return 0
	}
	var s Stats
	for i, h := range g.m.hier {
		d := g.dirs[i]
		if h.v2 {
			s.OOMKills += value(filepath.Join(d, "memory.events"), "oom_kill")
			s.PidsRefused += value(filepath.Join(d, "pids.events"), "max")
			s.PeakMemBytes = max(s.PeakMemBytes, value(filepath.Join(d, "memory.peak"), ""))
			continue
		}
		err := filepath.WalkDir(d, func(p string, e fs.DirEntry, err error) error {
			if err != nil || !e.IsDir() {
				return err
			}
			if slices.Contains(h.ctrls, "memory") {
				s.OOMKills += value(filepath.Join(p, "memory.oom_control"), "oom_kill")
			}
			if slices.Contains(h.ctrls, "pids") {
				s.PidsRefused += value(filepath.Join(p, "pids.events"), "max")
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if slices.Contains(h.ctrls, "memory") {
			s.PeakMemBytes = max(s.PeakMemBytes, value(filepath.Join(d, "memory.max_usage_in_bytes"), ""))
		}
	}
	return s
}

// TestStatsMatchesReread: after a limit is really hit — by processes in run,
// or in a group made below run after Stats opened its files — Stats says
// what reading every file again says, and sees the event.
func TestStatsMatchesReread(t *testing.T) {
	opt := boundGroup(t)
	m, err := NewManager(opt)
	if err != nil {
		t.Fatal(err)
	}
	const (
		bomb = `i=0; while [ $i -lt 64 ]; do sleep 30 & i=$((i+1)); done; wait`
		hog  = `exec /usr/bin/python3 -c 'x=[]
while True: x.append(b"\1" * (1<<20))'`
	)
	tests := []struct {
		name   string
		limits dryexec.Limits
		sub    string // "": processes in run; else a group made below run
		script string
		hit    func(Stats) bool
	}{
		{"pids in run", dryexec.Limits{Pids: 16}, "", bomb, func(s Stats) bool { return s.PidsRefused > 0 }},
		{"oom in run", dryexec.Limits{MemoryBytes: 64 << 20}, "", hog, func(s Stats) bool { return s.OOMKills > 0 }},
		{"pids below run", dryexec.Limits{Pids: 16}, "sub", bomb, func(s Stats) bool { return s.PidsRefused > 0 }},
		{"oom two below run", dryexec.Limits{MemoryBytes: 64 << 20}, "sub/deeper", hog, func(s Stats) bool { return s.OOMKills > 0 }},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			g, _, err := m.New("tr_stats"+strconv.Itoa(i), tt.limits)
			if err != nil {
				t.Fatal(err)
			}
			defer g.Remove()
			// A stand-in supervisor, sheltered: the v1 pids limit drops to
			// the one asked for.
			sup := exec.CommandContext(ctx, "sleep", "60")
			if err := sup.Start(); err != nil {
				t.Fatal(err)
			}
			defer sup.Wait()
			defer sup.Process.Kill()
			if err := g.ShelterThreads(sup.Process.Pid, 0); err != nil {
				t.Fatal(err)
			}
			if got, want := g.Stats(), reread(t, g); got != want {
				t.Fatalf("before: Stats %+v, reread %+v", got, want)
			}
			var cmd *exec.Cmd
			if tt.sub == "" {
				cmd = startGated(t, ctx, g, tt.script)
			} else {
				cmd = startBelowRun(t, ctx, g, tt.sub, tt.script)
			}
			cmd.Wait()
			quiesce(t, ctx, g, cmd.Process.Pid)
			got, want := g.Stats(), reread(t, g)
			if got != want {
				t.Fatalf("Stats %+v, reread %+v", got, want)
			}
			if !tt.hit(got) {
				t.Fatalf("stats %+v do not show the limit hit", got)
			}
			t.Logf("%+v", got)
		})
	}
}

// quiesce kills what is left of the script's process group (the bomb's
// sleeps, still charging memory) and waits until the group's tree holds no
// process, so that the counters hold still while they are compared.
func quiesce(t *testing.T, ctx context.Context, g *Group, pgid int) {
	t.Helper()
	syscall.Kill(-pgid, syscall.SIGKILL)
	for {
		n := 0
		for _, r := range g.runs {
			filepath.WalkDir(r, func(p string, e fs.DirEntry, err error) error {
				if err == nil && e.IsDir() {
					b, _ := os.ReadFile(filepath.Join(p, "cgroup.procs"))
					n += len(strings.Fields(string(b)))
				}
				return nil
			})
		}
		if n == 0 {
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%d processes still in the group", n)
		}
		// No event says a v1 group became empty (the release agent is
		// host-wide): poll.
		time.Sleep(time.Millisecond)
	}
}

// startBelowRun makes the group sub below run in every hierarchy and starts
// sh -c script in it.
func startBelowRun(t *testing.T, ctx context.Context, g *Group, sub, script string) *exec.Cmd {
	t.Helper()
	for _, r := range g.runs {
		if err := os.MkdirAll(filepath.Join(r, sub), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return startAttached(t, ctx, func(pid int) error {
		for _, r := range g.runs {
			if err := os.WriteFile(filepath.Join(r, sub, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
				return err
			}
		}
		return nil
	}, script)
}

// TestStatsAfterRemove: Remove closes what Stats opened (no fd is left), and
// Stats after Remove reads nothing.
func TestStatsAfterRemove(t *testing.T) {
	opt := boundGroup(t)
	m, err := NewManager(opt)
	if err != nil {
		t.Fatal(err)
	}
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(ents)
	}
	n := fds()
	g, _, err := m.New("tr_statsfd", dryexec.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	g.Stats()
	t.Logf("%d fds held", len(g.stats.fds))
	if len(g.stats.fds) == 0 {
		t.Error("Stats holds no files open")
	}
	if err := g.Remove(); err != nil {
		t.Fatal(err)
	}
	if after := fds(); after != n {
		t.Errorf("%d fds open after Remove, %d before New", after, n)
	}
	if s := g.Stats(); s != (Stats{}) {
		t.Errorf("Stats after Remove: %+v", s)
	}
}

func TestParseValue(t *testing.T) {
	tests := []struct {
		in, key string
		want    int64
	}{
		{"oom_kill_disable 0\nunder_oom 0\noom_kill 3\n", "oom_kill", 3},
		{"oom_kill_disable 1\n", "oom_kill", 0},
		{"max 12\n", "max", 12},
		{"max 12", "max", 12},
		{"low 0\nhigh 0\nmax 5\noom 2\noom_kill 1\noom_group_kill 0\n", "oom_kill", 1},
		{"123456789\n", "", 123456789},
		{"max\n", "", 0},
		{"", "max", 0},
		{"max x\n", "max", 0},
	}
	for _, tt := range tests {
		if got := parseValue([]byte(tt.in), tt.key); got != tt.want {
			t.Errorf("parseValue(%q, %q) = %d, want %d", tt.in, tt.key, got, tt.want)
		}
	}
}
