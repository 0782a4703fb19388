package linuxns

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
)

// hostState is what a trial could leak: mounts (overlays, tmpfs), namespaces still
// held by a process, processes, and our own open fds.
type hostState struct {
	mounts     []string
	namespaces map[string]proc // namespace → a process holding it
	procs      map[string]proc
	fds        int
}

// proc is a process's command line and whether this test process is its
// ancestor.
type proc struct {
	cmd  string
	ours bool
}

// descendant reports whether pid's parent chain reaches ancestor.
func descendant(pid, ancestor int) bool {
	for i := 0; i < 64 && pid > 1; i++ {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return false
		}
		// pid (comm) state ppid …: comm may hold spaces and parentheses.
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
		if len(f) < 2 {
			return false
		}
		if pid, _ = strconv.Atoi(f[1]); pid == ancestor {
			return true
		}
	}
	return false
}

func captureHost(t *testing.T) hostState {
	t.Helper()
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var mounts []string
	for _, l := range strings.Split(strings.TrimSpace(string(mi)), "\n") {
		f := strings.Fields(l)
		mounts = append(mounts, strings.Join(f[4:], " "))
	}
	sort.Strings(mounts)
	st := hostState{mounts: mounts, namespaces: map[string]proc{}, procs: map[string]proc{}}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		cmd, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err != nil {
			continue
		}
		pid, _ := strconv.Atoi(e.Name())
		// Other packages' tests run trials at the same time: only processes
		// this test started (its descendants: a leaked guest, and what runs
		// in its pid namespace) count.
		st.procs[e.Name()] = proc{cmd: strings.ReplaceAll(string(cmd), "\x00", " "), ours: descendant(pid, os.Getpid())}
		for _, ns := range []string{"mnt", "pid", "net", "ipc", "uts", "user", "cgroup"} {
			if l, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns", ns)); err == nil {
				st.namespaces[l] = st.procs[e.Name()]
			}
		}
	}
	fds, _ := os.ReadDir("/proc/self/fd")
	st.fds = len(fds)
	return st
}

func TestNoLeaksAfterManyTrials(t *testing.T) {
	requireNS(t)
	n := 200
	if testing.Short() {
		n = 20
	}
	dir := t.TempDir()
	runTrial(t, dir, dryexec.TrialSpec{}, "true") // warm up lazily opened fds
	before := captureHost(t)
	for i := 0; i < n; i++ {
		spec := dryexec.TrialSpec{}
		if i%10 == 0 {
			spec.Action.TimeoutMS = 50 // some trials end by timeout, with a survivor
			runTrial(t, dir, spec, "sh", "-c", "sleep 10 & echo x > f; sleep 10")
			continue
		}
		runTrial(t, dir, spec, "sh", "-c", "echo x > f; mkdir -p d/e; rm -rf /tmp/nothing")
	}
	after := captureHost(t)
	if strings.Join(before.mounts, "\n") != strings.Join(after.mounts, "\n") {
		t.Errorf("mounts changed:\nbefore %v\nafter  %v", before.mounts, after.mounts)
	}
	// A namespace outlives its last process only if something pins it (a bind
	// mount, which the mount check sees, or an open fd, which the process check
	// sees); other tests running in parallel create their own, so only
	// namespaces held by processes of ours count here.
	for ns, holder := range after.namespaces {
		if _, ok := before.namespaces[ns]; !ok && isTrialProcess(holder.cmd) && holder.ours {
			t.Errorf("namespace left behind: %s (held by %s)", ns, holder.cmd)
		}
	}
	for pid, cmd := range after.procs {
		if _, ok := before.procs[pid]; !ok && !strings.Contains(cmd.cmd, "/proc/self") && pid != "self" {
			// Anything new that is still alive after the loop came from a trial,
			// unless it is unrelated machine activity; trials run "sleep 10".
			if isTrialProcess(cmd.cmd) && cmd.ours {
				t.Errorf("process left behind: %s %s", pid, cmd.cmd)
			}
		}
	}
	if after.fds > before.fds {
		t.Errorf("fds: %d before, %d after", before.fds, after.fds)
	}
	if _, err := os.Stat(filepath.Join(dir, "f")); err == nil {
		t.Error("a trial wrote to the host")
	}
}

func isTrialProcess(cmdline string) bool {
	return strings.Contains(cmdline, "sleep 10") || strings.Contains(cmdline, "guest ns-trial")
}
