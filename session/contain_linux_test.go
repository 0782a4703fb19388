package session

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/cgroup/cgrouptest"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/wire"
)

// TestNSSessionContainment: an ns session runs in a cgroup with its limits
// (a bounded fork loop hits the pids limit, a memory bomb is OOM-killed and
// the session lives on), sees the caller's credentials empty, and reports
// both through Violations; the host's key is intact and no group is left.
func TestNSSessionContainment(t *testing.T) {
	bound := cgrouptest.Bound(t, 512<<20, 1024)
	home := t.TempDir()
	key := filepath.Join(home, ".ssh", "id_rsa")
	if err := os.MkdirAll(filepath.Dir(key), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(key, []byte("SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", home)
	s, err := Open(testCtx(t), Options{Rung: "ns", Cgroups: bound,
		Limits: dryexec.Limits{Pids: 32, MemoryBytes: 128 << 20},
		Env:    map[string]string{"PATH": "/usr/bin:/bin", "HOME": home}})
	if err != nil {
		testreq.Need(t, testreq.NS, err)
	}
	defer s.Close()
	if w := s.Warnings(); len(w) != 0 {
		t.Errorf("warnings: %v", w)
	}
	steps := []struct {
		cmd, stdout string
		want        string // a violation detail containing this, "" for none new
		maybe       bool   // want: any number of new ones, each containing it
	}{
		{`cat ~/.ssh/id_rsa; echo .`, ".\n", key, false},
		{`echo fine; export KEEP=kept`, "fine\n", "", false},
		{`/usr/bin/python3 -c 'x=[]
while True: x.append(b"\1" * (1<<20))' 2>/dev/null; echo rc=$?`, "rc=137\n", "memory limit 134217728 bytes", false},
		// A bounded loop (it cannot run away even unlimited): more processes
		// than the limit plus the supervisor's headroom. It comes after the
		// memory bomb because its sleepers outlive it (the subshell dies on
		// its first refused fork) and would have python's forks refused too.
		{`(i=0; while [ $i -lt 400 ]; do sleep 20 & i=$((i+1)); done) 2>/dev/null; echo started`, "started\n", "pids limit 32 reached", false},
		// The sleepers still hold the limit: the shell's own bookkeeping
		// (env -0) may be refused too, which is reported again, and the
		// session's environment must survive that.
		{`echo still here $KEEP`, "still here kept\n", "pids limit 32 reached", true},
		{`echo $KEEP`, "kept\n", "pids limit 32 reached", true},
	}
	seen := 0
	for _, st := range steps {
		r, err := s.Shell(testCtx(t), st.cmd, 30*time.Second)
		if err != nil {
			t.Fatalf("%q: %v", st.cmd, err)
		}
		if r.Stdout != st.stdout {
			t.Errorf("%q: stdout %q, want %q (stderr %.200q)", st.cmd, r.Stdout, st.stdout, r.Stderr)
		}
		v := s.Violations()
		if st.maybe {
			for _, x := range v[seen:] {
				if !strings.Contains(x.Detail, st.want) {
					t.Errorf("%q: new violation %+v, want only %q", st.cmd, x, st.want)
				}
			}
			seen = len(v)
			continue
		}
		if st.want == "" {
			if len(v) != seen {
				t.Errorf("%q: new violations %+v", st.cmd, v[seen:])
			}
			continue
		}
		if len(v) != seen+1 || !strings.Contains(v[seen].Detail, st.want) {
			t.Errorf("%q: violations %+v, want one more with %q", st.cmd, v, st.want)
		} else if strings.Contains(v[seen].Detail, "kept for the supervisor") {
			// The guest's launcher thread was not found: its other threads
			// still share the limit.
			t.Errorf("the supervisor was not sheltered: %s", v[seen].Detail)
		}
		seen = len(v)
	}
	if b, _ := os.ReadFile(key); string(b) != "SECRET" {
		t.Errorf("the host's key is now %q", b)
	}
}

// TestNSSessionOOMTargetsNoGuest: an exec makes /proc/1 (its pid
// namespace's init) the OOM killer's first choice and fills the session's
// memory limit. Whatever the kernel kills, it is the sandbox's own: the
// session's guest lives on, and the next exec runs (in a new pid
// namespace if the init went: renewLauncher).
func TestNSSessionOOMTargetsNoGuest(t *testing.T) {
	bound := cgrouptest.Bound(t, 512<<20, 1024)
	s, err := Open(testCtx(t), Options{Rung: "ns", Cgroups: bound, Limits: dryexec.Limits{MemoryBytes: 128 << 20}})
	if err != nil {
		testreq.Need(t, testreq.NS, err)
	}
	defer s.Close()
	r, err := s.Shell(testCtx(t), `for t in /proc/1/task/*; do echo 1000 > $t/oom_score_adj; done; cat /proc/1/oom_score_adj
/usr/bin/python3 -c 'x=[]
while True: x.append(b"\1" * (1<<20))' 2>/dev/null; echo rc=$?`, 60*time.Second)
	if err != nil {
		t.Fatalf("the attacking exec: %v", err)
	}
	t.Logf("the attack: exit %d, stdout %q", r.ExitCode, r.Stdout)
	if !strings.HasPrefix(r.Stdout, "1000\n") {
		t.Fatalf("the attack did not raise /proc/1's oom_score_adj: %q (stderr %q)", r.Stdout, r.Stderr)
	}
	for i := range 2 {
		r, err = s.Shell(testCtx(t), "echo alive", 30*time.Second)
		if err != nil || r.Stdout != "alive\n" {
			t.Fatalf("exec %d after the attack: %+v, %v", i+1, r, err)
		}
	}
}

// TestWarmRunnerInSessionGroup: a session opened with a warm Python runner
// has that runner running, in the session's cgroup (pids and memory), when
// Open returns. The host moves the guest's threads but its launcher out of
// the group once the session is up; a runner the launcher forked while
// they were out would have been born outside the limits, with everything
// its Python execs start.
func TestWarmRunnerInSessionGroup(t *testing.T) {
	bound := cgrouptest.Bound(t, 512<<20, 1024)
	for i := range 5 {
		s, err := Open(testCtx(t), Options{Rung: "ns", Cgroups: bound, PythonWarm: true,
			Limits: dryexec.Limits{Pids: 64, MemoryBytes: 256 << 20}})
		if err != nil {
			testreq.Need(t, testreq.NS, err)
		}
		guest := s.GuestPID()
		var runners int
		for _, child := range childPIDs(t, guest) {
			// Every child but the pid namespace's init: the runner may be
			// the trampoline still, or amid its exec of python3.
			cmdline, _ := os.ReadFile("/proc/" + child + "/cmdline")
			if strings.Contains(string(cmdline), wire.RolePIDInit) {
				continue
			}
			runners++
			groups, err := os.ReadFile("/proc/" + child + "/cgroup")
			if err != nil {
				t.Fatal(err)
			}
			for _, l := range strings.Split(strings.TrimSpace(string(groups)), "\n") {
				f := strings.SplitN(l, ":", 3)
				if len(f) == 3 && (f[1] == "pids" || f[1] == "memory") && !strings.HasSuffix(f[2], "/run") {
					t.Errorf("open %d: the warm runner (pid %s) is in %s group %q, not the session's", i, child, f[1], f[2])
				}
			}
		}
		if runners != 1 {
			t.Errorf("open %d: %d warm runners among the guest's children when Open returned, want 1", i, runners)
		}
		s.Close()
	}
}

// childPIDs lists the host pids of pid's children (every thread's).
func childPIDs(t *testing.T, pid int) []string {
	t.Helper()
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, task := range tasks {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/children", pid, task.Name()))
		out = append(out, strings.Fields(string(b))...)
	}
	return out
}

// TestNSSessionExecIsNative: an ns session's exec, which starts in the
// session's pid namespace and the mount namespace of its init, sees its own
// mount table (df, findmnt and mount read /proc/self/mountinfo, empty for a
// process chrooted out of its mount namespace) and, as root, has root's
// capabilities in its user namespace and no ambient or inheritable ones
// (its user namespace is mapped after its start: mapLater), as a process
// started mapped would.
func TestNSSessionExecIsNative(t *testing.T) {
	s, err := Open(testCtx(t), Options{Rung: "ns"})
	if err != nil {
		testreq.Need(t, testreq.NS, err)
	}
	defer s.Close()
	r, err := s.Shell(testCtx(t), `df -P . >/dev/null && echo df-ok; grep -c " /workspace " /proc/self/mountinfo; grep -E "^Cap(Inh|Eff|Amb)" /proc/self/status`, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(r.Stdout), "\n")
	if len(lines) != 5 || lines[0] != "df-ok" || lines[1] == "0" {
		t.Fatalf("the exec's mount table: %q (stderr %q)", r.Stdout, r.Stderr)
	}
	if os.Getuid() != 0 {
		return
	}
	caps := map[string]string{}
	for _, l := range lines[2:] {
		k, v, _ := strings.Cut(l, ":")
		caps[k] = strings.TrimSpace(v)
	}
	last, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		t.Fatal(err)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(last)))
	full := strconv.FormatUint(1<<(n+1)-1, 16)
	if strings.TrimLeft(caps["CapEff"], "0") != full || strings.Trim(caps["CapInh"], "0") != "" || strings.Trim(caps["CapAmb"], "0") != "" {
		t.Errorf("the exec's capabilities %v, want every one effective (%s) and none inheritable or ambient", caps, full)
	}
}
