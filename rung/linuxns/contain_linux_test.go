package linuxns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/cgroup"
)

// boundRung returns a Rung whose sandboxes' cgroups live inside a group of the
// test's own with hard limits (512 MiB, 1024 tasks): should the sandbox's own
// limits fail, a bomb stops there instead of taking the machine down. The
// bound group is removed at the end, and the test fails if any dryexec group
// of this process is left in the host's tree.
func boundRung(t *testing.T) *Rung {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create cgroups on this host (rootless: see TestRootlessFallsBackToRlimits)")
	}
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	name := "dryexec-bound-" + strconv.Itoa(os.Getpid()) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	var made []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			if c != "memory" && c != "pids" && c != "cpu" {
				continue
			}
			d := filepath.Join("/sys/fs/cgroup", c, f[2], name)
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Skipf("cannot make a bound group: %v", err)
			}
			made = append(made, d)
			os.WriteFile(filepath.Join(d, "memory.limit_in_bytes"), []byte("536870912"), 0)
			os.WriteFile(filepath.Join(d, "pids.max"), []byte("1024"), 0)
		}
	}
	t.Cleanup(func() {
		for _, d := range made {
			os.Remove(filepath.Join(d, cgroup.ParentName))
			if err := os.Remove(d); err != nil {
				t.Errorf("removing the bound group: %v (left: %v)", err, cgroup.Leftovers())
			}
		}
		for _, p := range cgroup.Leftovers() {
			if strings.Contains(p, "."+strconv.Itoa(os.Getpid())+"-") {
				t.Errorf("a dryexec group of this test is left: %s", p)
			}
		}
	})
	return &Rung{Cgroups: cgroup.Options{Parent: name + "/" + cgroup.ParentName}}
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
	if len(d.Violations) != 0 || d.Process.ExitCode != 0 || len(d.Warnings) != 0 {
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
	want := map[string]string{"memory.limit_in_bytes": "268435456", "pids.max": "100", "cpu.cfs_quota_us": "50000", "cpu.shares": "512"}
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
// leaves its group (and the sandbox, whose guest dies with it); the next
// start's sweep removes it.
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
	syscall.Kill(child, syscall.SIGKILL)
	cmd.Wait()
	var left []string
	for _, p := range cgroup.Leftovers() {
		if strings.Contains(p, "."+strconv.Itoa(child)+"-") {
			left = append(left, p)
		}
	}
	if len(left) == 0 {
		t.Fatal("the killed host left no group: the test proves nothing")
	}
	if _, err := cgroup.Sweep(); err != nil {
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
