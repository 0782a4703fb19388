package vm_test

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
	"github.com/dryexec/dryexec/internal/guestexe"
	"github.com/dryexec/dryexec/internal/procfs"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/rung/vm"
	"github.com/dryexec/dryexec/session"
	"github.com/dryexec/dryexec/wire"
)

// requireVMSession skips unless VMs boot here and DRYEXEC_TEST_VM is set
// (a session's VM boots under TCG: seconds), and returns the static guest.
func requireVMSession(t testing.TB) string {
	t.Helper()
	if testing.Short() {
		t.Skip("boots VMs")
	}
	if os.Getenv("DRYEXEC_TEST_VM") == "" {
		t.Skip("set DRYEXEC_TEST_VM=1 (make test-vm) to run it")
	}
	exe := vm.StaticGuest(t)
	t.Setenv(guestexe.Env, exe)
	testreq.Need(t, testreq.VM, (&vm.Rung{}).Available(context.Background()))
	return exe
}

func openVM(t *testing.T, opt session.Options) *session.Session {
	t.Helper()
	opt.Rung = vm.Name
	s, err := session.Open(t.Context(), opt)
	if err != nil {
		t.Fatalf("opening a vm session: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestSession: a vm session's guest runs in the VM (its own kernel, the
// view as its root), keeps its workspace by scanning, carries the shell's
// state between execs, diffs what a command changed and drops writes
// outside the workspace with the VM; what it cannot do is refused, typed.
func TestSession(t *testing.T) {
	requireVMSession(t)
	// Limits from the same spec as a trial's: the memory limit is the VM's
	// RAM, the pids limit each exec's RLIMIT_NPROC.
	s := openVM(t, session.Options{Limits: dryexec.Limits{MemoryBytes: 256 << 20, Pids: 40}})
	if i := s.Info(); i.Rung != vm.Name || i.Staging != "scan" || i.Workspace != "/workspace" {
		t.Fatalf("Info %+v: want rung vm, staging scan, workspace /workspace", i)
	}
	// The VM's clock is the host's (set from session.start), not the RTC's
	// whole second, up to a second behind: what the command reads lies
	// between the host's clock before the exec and after it (a little
	// ahead allowed: under TCG the VM's clock runs fast).
	before := time.Now()
	r, err := s.Shell(t.Context(), "date +%s.%N", time.Minute)
	after := time.Now()
	if err != nil {
		t.Fatal(err)
	}
	vmNow, err := strconv.ParseFloat(strings.TrimSpace(r.Stdout), 64)
	if err != nil {
		t.Fatalf("date in the VM: %q", r.Stdout)
	}
	if at := time.Unix(0, int64(vmNow*1e9)); at.Before(before.Add(-50*time.Millisecond)) || at.After(after.Add(time.Second)) {
		t.Errorf("the VM's clock read %v, the host's was %v to %v: want the host's clock", at, before, after)
	}
	hostKernel, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "outside")
	steps := []struct {
		command, stdout string
	}{
		{"cat /proc/sys/kernel/random/boot_id", ""}, // checked below: not the host's
		{"echo one > a && mkdir -p d && echo two > d/b && cd d && export DX=kept", ""},
		{`pwd; echo "$DX"`, "/workspace/d\nkept\n"},
		{"echo gone > " + outside + " && cat " + outside, "gone\n"},
		{"id -u; hostname >/dev/null; echo ok", "0\nok\n"},
		{"ulimit -u", "40\n"},
		{`awk '/^MemTotal:/ { print ($2 > 180000 && $2 <= 262144) ? "ram ok" : "ram " $2 }' /proc/meminfo`, "ram ok\n"},
	}
	for i, st := range steps {
		r, err := s.Shell(t.Context(), st.command, time.Minute)
		if err != nil {
			t.Fatalf("Shell(%q): %v", st.command, err)
		}
		if r.ExitCode != 0 {
			t.Fatalf("Shell(%q): exit %d\n%s", st.command, r.ExitCode, r.Transcript)
		}
		if i == 0 {
			if strings.TrimSpace(r.Stdout) == "" || r.Stdout == string(hostKernel) {
				t.Fatalf("the session's kernel has boot id %q, the host's %q: want a kernel of its own", r.Stdout, hostKernel)
			}
			continue
		}
		if st.stdout != "" && r.Stdout != st.stdout {
			t.Fatalf("Shell(%q): stdout %q, want %q", st.command, r.Stdout, st.stdout)
		}
	}
	d, err := s.Diff(t.Context(), false)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"a": "one\n", "d/b": "two\n"}
	if len(d.Writes) != len(want) || len(d.Deletes) != 0 {
		t.Fatalf("diff writes %v deletes %v, want %v", d.Writes, d.Deletes, want)
	}
	for p, b := range want {
		if string(d.Writes[p]) != b {
			t.Errorf("diff write %s = %q, want %q", p, d.Writes[p], b)
		}
	}
	if _, err := os.Lstat(outside); err == nil {
		t.Errorf("%s, written in the VM, is on the host", outside)
	}

	refusals := []struct {
		name string
		do   func() error
		is   func(error) bool
	}{
		{"fork", func() error { _, err := s.Fork(t.Context(), 2); return err },
			func(err error) bool { return errors.Is(err, session.ErrForkUnsupported) }},
	}
	for _, rf := range refusals {
		t.Run(rf.name, func(t *testing.T) {
			if err := rf.do(); !rf.is(err) {
				t.Fatalf("got %v, want the typed refusal", err)
			}
		})
	}
}

// TestSessionNet: a vm session's network is a trial's (netsim behind the
// VM's virtio-net): a mocked HTTPS API answers curl in one exec and again in
// the next, each result lists its own exec's requests, the session's log
// lists them all, and a host neither allowed nor mocked gets netsim's 403.
func TestSessionNet(t *testing.T) {
	requireVMSession(t)
	if _, err := exec.LookPath("node"); err != nil {
		t.Fatal("node is not installed (make deps installs it)")
	}
	mock := filepath.Join(t.TempDir(), "mock.yaml")
	if err := os.WriteFile(mock, []byte("routes:\n  - host: api.example.com\n    path: /v1/ping\n    json: {pong: true}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := openVM(t, session.Options{Net: []string{"mock:" + mock}, NetCADir: filepath.Join(t.TempDir(), "ca")})
	steps := []struct{ command, stdout, url, action string }{
		{"curl -sS -m 60 https://api.example.com/v1/ping", `{"pong":true}`, "https://api.example.com/v1/ping", "mocked"},
		{"curl -sS -m 60 -o /dev/null -w '%{http_code}' http://denied.example.org/", "403", "http://denied.example.org/", "blocked"},
		// Node reads no system bundle: it trusts netsim's CA only through
		// the trust variables the session's execs get.
		{`node -e 'require("https").get("https://api.example.com/v1/ping", r => r.pipe(process.stdout)).on("error", e => console.log(e.code))'`,
			`{"pong":true}`, "https://api.example.com/v1/ping", "mocked"},
	}
	var urls []string
	for _, st := range steps {
		r, err := s.Shell(t.Context(), st.command, 3*time.Minute)
		if err != nil {
			t.Fatalf("Shell(%q): %v", st.command, err)
		}
		if r.Stdout != st.stdout {
			t.Fatalf("Shell(%q): stdout %q, want %q\n%s", st.command, r.Stdout, st.stdout, r.Transcript)
		}
		var got []string
		for _, e := range r.Network {
			if e.URL != "" {
				got = append(got, e.URL+" "+e.Action)
			}
		}
		if want := st.url + " " + st.action; len(got) != 1 || got[0] != want {
			t.Errorf("Shell(%q): its network %q, want just %q", st.command, got, want)
		}
		urls = append(urls, st.url)
	}
	var all []string
	for _, e := range s.Network() {
		if e.URL != "" {
			all = append(all, e.URL)
		}
	}
	if fmt.Sprint(all) != fmt.Sprint(urls) {
		t.Errorf("the session's network log %q, want %q", all, urls)
	}
}

// TestSessionQEMUKilledMidExec: QEMU killed while an exec runs ends that
// call with ErrSessionLost (and every later one), and once the session is
// closed nothing of its VM is left on the host: no QEMU process, no socket
// of this process, no temporary dir.
func TestSessionQEMUKilledMidExec(t *testing.T) {
	requireVMSession(t)
	// A TMPDIR of the test's own: other processes on the machine write in
	// the shared one.
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	socksBefore := sockets(t)
	started := make(chan struct{}, 1)
	s := openVM(t, session.Options{OnEmit: func(e wire.Emit) {
		if e.Name == "started" {
			started <- struct{}{}
		}
	}})
	qemu := qemuChildren(t)
	if len(qemu) != 1 {
		t.Fatalf("QEMU children %v, want one", qemu)
	}
	// The exec has started (it emitted) when QEMU is killed.
	signalOn(started, qemu[0], syscall.SIGKILL)
	_, err := s.Python(t.Context(), "emit('started', 1)\nimport time\ntime.sleep(600)", nil, 0)
	if !errors.Is(err, dryexec.ErrSessionLost) {
		t.Fatalf("Python while QEMU was killed: %v; want ErrSessionLost", err)
	}
	if _, err := s.Shell(t.Context(), "true", time.Minute); !errors.Is(err, dryexec.ErrSessionLost) {
		t.Errorf("Shell after the kill: %v; want ErrSessionLost", err)
	}
	s.Close()
	checkNothingLeft(t, "", tmp, socksBefore)
}

// signalOn sends sig to pid once started is signalled (the exec has
// started), unless that takes 4 minutes.
func signalOn(started <-chan struct{}, pid int, sig syscall.Signal) {
	go func() {
		select {
		case <-started:
			syscall.Kill(pid, sig)
		case <-time.After(4 * time.Minute):
		}
	}()
}

// checkNothingLeft fails t if anything of a closed vm sandbox is left on
// the host: a QEMU, its cgroup (of the sandbox id, unless ""), a socket
// beyond the socksBefore this process had, a file in its TMPDIR tmp.
func checkNothingLeft(t *testing.T, id, tmp string, socksBefore int) {
	t.Helper()
	if left := qemuChildren(t); len(left) != 0 {
		t.Errorf("QEMU processes left: %v", left)
	}
	if id != "" {
		if left := vmGroups(id); len(left) != 0 {
			t.Errorf("cgroups left: %v", left)
		}
	}
	if n := sockets(t); n > socksBefore {
		t.Errorf("%d sockets open after Close, %d before", n, socksBefore)
	}
	if left := dirNames(t, tmp); len(left) > 0 {
		t.Errorf("left in TMPDIR: %v", left)
	}
}

// qemuChildren lists this process's children that are QEMU (a vm sandbox's
// view guest becomes QEMU), zombies included.
func qemuChildren(t *testing.T) []int {
	t.Helper()
	return procfs.Children(os.Getpid(), func(comm string, _ []string) bool { return strings.HasPrefix(comm, "qemu-system") })
}

// sockets counts this process's open socket descriptors.
func sockets(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "socket:") {
			n++
		}
	}
	return n
}

func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	return names
}
