package vm_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/testhooks"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/policy"
	"github.com/dryexec/dryexec/rung/vm"
	"github.com/dryexec/dryexec/session"
)

// markerWriter signals once the command's output holds "started".
type markerWriter struct {
	mu   sync.Mutex
	buf  bytes.Buffer
	once sync.Once
	seen chan struct{}
}

func (w *markerWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if strings.Contains(w.buf.String(), "started") {
		w.once.Do(func() { close(w.seen) })
	}
	return len(p), nil
}

// vmGroups are the cgroup directories of the trial id's VM, in every
// hierarchy (v1 and v2).
func vmGroups(id string) []string {
	var dirs []string
	for _, pat := range []string{"/sys/fs/cgroup/*/dryexec/vm-" + id + "*", "/sys/fs/cgroup/dryexec/vm-" + id + "*"} {
		m, _ := filepath.Glob(pat)
		dirs = append(dirs, m...)
	}
	return dirs
}

// groupPIDs are the processes in the VM's groups (their run dirs).
func groupPIDs(t *testing.T, dirs []string) []int {
	t.Helper()
	seen := map[int]bool{}
	var pids []int
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "run", "cgroup.procs"))
		if err != nil {
			continue
		}
		for f := range strings.FieldsSeq(string(b)) {
			if p, err := strconv.Atoi(f); err == nil && !seen[p] {
				seen[p] = true
				pids = append(pids, p)
			}
		}
	}
	return pids
}

// faultTrial runs argv (which prints "started" once it runs) on r; at the
// marker, it checks that QEMU runs in the trial's cgroup with its limits
// and hands QEMU's pid, found through the group, to fault (nil: the fault
// comes from inside the VM, and nothing waits for the marker). It requires the
// delta marked incomplete (which policy blocks) and nothing of the VM left:
// no QEMU process, cgroup, socket or temporary file.
func faultTrial(t *testing.T, r *vm.Rung, spec dryexec.TrialSpec, argv []string, fault func(qemu int)) *dryexec.StateDelta {
	t.Helper()
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	socksBefore := sockets(t)
	spec.TrialID = dryexec.NewTrialID()
	spec.Action.Argv, spec.Action.Cwd = argv, tmp
	if spec.Action.Env == nil {
		spec.Action.Env = map[string]string{}
	}
	spec.Action.Env["PATH"] = "/usr/bin:/bin:/usr/sbin:/sbin"
	w := &markerWriter{seen: make(chan struct{})}
	spec.Stdout = w
	faulted := make(chan struct{})
	if fault == nil {
		close(faulted)
	}
	go func() {
		if fault == nil {
			return
		}
		defer close(faulted)
		select {
		case <-w.seen:
		case <-time.After(4 * time.Minute):
			t.Error("no marker from the command")
			return
		}
		dirs := vmGroups(spec.TrialID)
		if len(dirs) == 0 {
			t.Error("the VM has no cgroup")
			return
		}
		qemu := qemuChildren(t)
		pids := groupPIDs(t, dirs)
		if len(qemu) != 1 || len(pids) != 1 || pids[0] != qemu[0] {
			t.Errorf("QEMU %v, in the VM's cgroup %v: want the one QEMU there", qemu, pids)
			return
		}
		for _, d := range dirs {
			if b, err := os.ReadFile(filepath.Join(d, "memory.limit_in_bytes")); err == nil {
				want := spec.Limits.MemoryBytes + vm.QEMUOverheadBytes
				if got, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); got != want {
					t.Errorf("memory.limit_in_bytes %d, want %d (the limit and QEMU's overhead)", got, want)
				}
			}
			if b, err := os.ReadFile(filepath.Join(d, "cpu.cfs_quota_us")); err == nil && strings.TrimSpace(string(b)) != "150000" {
				t.Errorf("cpu.cfs_quota_us %s, want 150000 (1.5 CPUs)", b)
			}
			if b, err := os.ReadFile(filepath.Join(d, "cpu.max")); err == nil && !strings.HasPrefix(string(b), "150000 ") {
				t.Errorf("cpu.max %s, want 150000 per period (1.5 CPUs)", b)
			}
		}
		fault(pids[0])
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	d, err := r.Trial(ctx, spec)
	<-faulted
	faultedDelta(t, d, err, spec.TrialID, socksBefore)
	if left := dirNames(t, tmp); len(left) > 0 {
		t.Errorf("left in TMPDIR: %v", left)
	}
	t.Logf("incomplete: %s", d.IncompleteReason)
	return d
}

// faultedDelta requires the delta d (err: the trial's error) of a VM that
// faulted marked incomplete, which policy blocks, and nothing of trial
// id's VM left: no QEMU process, cgroup, or socket beyond socksBefore.
func faultedDelta(t *testing.T, d *dryexec.StateDelta, err error, id string, socksBefore int) {
	t.Helper()
	if err != nil {
		t.Fatalf("trial: %v (want a delta marked incomplete)", err)
	}
	if !d.Incomplete || d.IncompleteReason == "" {
		t.Errorf("delta incomplete %v (%q), want incomplete; exit %d, stderr %s", d.Incomplete, d.IncompleteReason, d.Process.ExitCode, d.Process.Stderr)
	}
	eng, err := policy.Compile(policy.Default())
	if err != nil {
		t.Fatal(err)
	}
	if dec := eng.Decide(t.Context(), d).Decision; dec.Choice != "block" {
		t.Errorf("policy decided %s (%v), want block", dec.Choice, dec.Reasons)
	}
	if left := qemuChildren(t); len(left) != 0 {
		t.Errorf("QEMU processes left: %v", left)
	}
	if left := vmGroups(id); len(left) != 0 {
		t.Errorf("cgroups left: %v", left)
	}
	if n := sockets(t); n > socksBefore {
		t.Errorf("%d sockets open after the trial, %d before", n, socksBefore)
	}
}

var faultLimits = dryexec.Limits{MemoryBytes: 256 << 20, CPUs: 1.5}

// TestTrialQEMUKilled: QEMU SIGKILLed while the command runs ends the
// trial with a delta marked incomplete, and nothing of the VM left.
func TestTrialQEMUKilled(t *testing.T) {
	requireVMSession(t)
	spec := dryexec.TrialSpec{Limits: faultLimits, Action: dryexec.Action{TimeoutMS: 300_000}}
	faultTrial(t, &vm.Rung{}, spec, []string{"sh", "-c", "echo started; sleep 600"}, func(qemu int) {
		syscall.Kill(qemu, syscall.SIGKILL)
	})
}

// TestTrialVMHung: a VM that stops answering (QEMU SIGSTOPped) ends the
// trial at the command's timeout and WalkGrace, with a delta marked
// incomplete: the host does not wait for it.
func TestTrialVMHung(t *testing.T) {
	requireVMSession(t)
	r := &vm.Rung{WalkGrace: 5 * time.Second}
	spec := dryexec.TrialSpec{Limits: faultLimits, Action: dryexec.Action{TimeoutMS: 30_000}}
	d := faultTrial(t, r, spec, []string{"sh", "-c", "echo started; sleep 600"}, func(qemu int) {
		syscall.Kill(qemu, syscall.SIGSTOP)
	})
	if !strings.Contains(d.IncompleteReason, "no report within") {
		t.Errorf("incomplete reason %q: want the missing report named", d.IncompleteReason)
	}
}

// TestTrialKernelPanic: the VM's kernel panicking as the command starts
// (the guest's test hook: nothing in the sandbox can) ends the trial with a
// delta marked incomplete that names the panic, blocked, and nothing of the
// VM left: panic=-1 resets the VM at once, and -no-reboot makes that QEMU's
// exit, not a VM left sitting at its panic.
func TestTrialKernelPanic(t *testing.T) {
	requireVMSession(t)
	testreq.NeedTestHooks(t)
	spec := dryexec.TrialSpec{Limits: faultLimits, Action: dryexec.Action{TimeoutMS: 300_000}}
	d := faultTrial(t, &vm.Rung{}, spec, []string{"env", testhooks.VMPanicEnv + "=1", "sh", "-c", "echo started; sleep 600"}, nil)
	if !strings.HasPrefix(d.IncompleteReason, "the VM failed mid-trial (the VM's kernel panicked (Kernel panic - not syncing: sysrq triggered crash)") {
		t.Errorf("incomplete reason %q: want the VM's kernel panic named", d.IncompleteReason)
	}
}

// TestSessionOOM: an exec that fills the VM's RAM (the session's memory
// limit) is OOM-killed by the VM's kernel, which the host cannot see: the
// session records it as ns records its cgroup's (TestNSSessionContainment):
// one {kind: limit} violation of the session's naming the limit, none in
// the exec's result, and the session lives on (its guest is not chosen).
func TestSessionOOM(t *testing.T) {
	requireVMSession(t)
	s := openVM(t, session.Options{Limits: dryexec.Limits{MemoryBytes: 128 << 20}})
	steps := []struct{ cmd, stdout, want string }{
		{"echo fine", "fine\n", ""},
		{`/usr/bin/python3 -c 'x=[]
while True: x.append(b"\1" * (1<<20))' 2>/dev/null; echo rc=$?`, "rc=137\n", "memory limit 134217728 bytes (128 MiB) reached: the kernel killed 1 process(es) (OOM)"},
		{"echo still here", "still here\n", ""},
	}
	seen := 0
	for _, st := range steps {
		r, err := s.Shell(t.Context(), st.cmd, 3*time.Minute)
		if err != nil {
			t.Fatalf("%q: %v", st.cmd, err)
		}
		if r.Stdout != st.stdout || len(r.Violations) != 0 || r.OOMKills != 0 {
			t.Errorf("%q: stdout %q, violations %+v, oom kills %d; want %q and none in the result", st.cmd, r.Stdout, r.Violations, r.OOMKills, st.stdout)
		}
		v := s.Violations()
		switch {
		case st.want == "" && len(v) != seen:
			t.Errorf("%q: new violations %+v", st.cmd, v[seen:])
		case st.want != "" && (len(v) != seen+1 || v[seen].Kind != dryexec.ViolationLimit || v[seen].Detail != st.want):
			t.Errorf("%q: violations %+v, want one more: limit %q", st.cmd, v[seen:], st.want)
		}
		seen = len(v)
	}
}

// TestSessionKernelPanic: the VM's kernel panicking as an exec starts (the
// guest's test hook) ends that call with ErrSessionLost naming the panic,
// and every later one; once the session is closed nothing of its VM is left
// on the host: no QEMU process, cgroup, socket of this process or temporary
// dir.
func TestSessionKernelPanic(t *testing.T) {
	requireVMSession(t)
	testreq.NeedTestHooks(t)
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	socksBefore := sockets(t)
	s := openVM(t, session.Options{Env: map[string]string{"PATH": "/usr/bin:/bin", testhooks.VMPanicEnv: "1"}})
	qemu := qemuChildren(t)
	if len(qemu) != 1 {
		t.Fatalf("QEMU children %v, want one", qemu)
	}
	groups := procGroups(t, qemu[0])
	if len(groups) == 0 {
		t.Fatal("QEMU is in no cgroup of dryexec's")
	}
	_, err := s.Shell(t.Context(), "echo started; sleep 600", 5*time.Minute)
	if !errors.Is(err, dryexec.ErrSessionLost) || !strings.Contains(err.Error(), "after the VM's kernel panicked (Kernel panic - not syncing: sysrq triggered crash)") {
		t.Fatalf("Shell while the VM's kernel panicked: %v; want ErrSessionLost naming the panic", err)
	}
	t.Logf("lost: %v", err)
	if _, err := s.Shell(t.Context(), "true", time.Minute); !errors.Is(err, dryexec.ErrSessionLost) {
		t.Errorf("Shell after the panic: %v; want ErrSessionLost", err)
	}
	s.Close()
	if left := qemuChildren(t); len(left) != 0 {
		t.Errorf("QEMU processes left: %v", left)
	}
	for _, g := range groups {
		if _, err := os.Stat(g); err == nil {
			t.Errorf("cgroup left: %s", g)
		}
	}
	if n := sockets(t); n > socksBefore {
		t.Errorf("%d sockets open after Close, %d before", n, socksBefore)
	}
	if left := dirNames(t, tmp); len(left) > 0 {
		t.Errorf("left in TMPDIR: %v", left)
	}
}

// procGroups are the directories of pid's cgroups under dryexec's parent,
// in every mounted hierarchy.
func procGroups(t *testing.T, pid int) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for line := range strings.SplitSeq(strings.TrimSpace(string(b)), "\n") {
		// hierarchy-ID:controllers:path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 || !strings.Contains(parts[2], "/dryexec/") {
			continue
		}
		m, _ := filepath.Glob("/sys/fs/cgroup/*" + parts[2])
		if parts[1] == "" {
			m = append(m, "/sys/fs/cgroup"+parts[2])
		}
		for _, d := range m {
			if _, err := os.Stat(d); err == nil {
				dirs = append(dirs, d)
			}
		}
	}
	return dirs
}

// TestTrialVMSilent: a VM that stops answering (QEMU SIGSTOPped) while a
// command without a timeout runs ends the trial once the VM has been
// silent for SilenceLimit, with a delta marked incomplete that names it:
// nothing else bounds such a trial.
func TestTrialVMSilent(t *testing.T) {
	requireVMSession(t)
	// The boot's own bound is generous: a boot on this loaded host has
	// taken over a minute, and the test is about the command's silence.
	r := &vm.Rung{SilenceLimit: 10 * time.Second, BootTimeout: 5 * time.Minute}
	spec := dryexec.TrialSpec{Limits: faultLimits}
	d := faultTrial(t, r, spec, []string{"sh", "-c", "echo started; sleep 600"}, func(qemu int) {
		syscall.Kill(qemu, syscall.SIGSTOP)
	})
	if !strings.Contains(d.IncompleteReason, "stopped answering") {
		t.Errorf("incomplete reason %q: want the silent VM named", d.IncompleteReason)
	}
}

// TestTrialQuietCommandLives: a command without a timeout that prints
// nothing for longer than SilenceLimit is not taken for a hung VM: the
// guest's heartbeat keeps it alive, and the trial ends normally.
func TestTrialQuietCommandLives(t *testing.T) {
	requireVMSession(t)
	r := &vm.Rung{SilenceLimit: 10 * time.Second, BootTimeout: 5 * time.Minute}
	dir := t.TempDir()
	d, err := r.Trial(context.Background(), dryexec.TrialSpec{Action: dryexec.Action{
		Argv: []string{"sleep", "30"}, Cwd: dir, Env: map[string]string{"PATH": "/usr/bin:/bin"}}})
	if err != nil {
		t.Fatal(err)
	}
	if d.Incomplete || d.Process.ExitCode != 0 {
		t.Fatalf("exit %d, incomplete %v (%s): want a normal end", d.Process.ExitCode, d.Incomplete, d.IncompleteReason)
	}
}
