package linuxns

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/acceptance"
	"github.com/dryexec/dryexec/internal/procfs"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/internal/testwait"
)

// newTestPool starts a pool for dir and waits until n sandboxes are ready.
func newTestPool(t *testing.T, dir string, opts PoolOptions, n int) *Pool {
	t.Helper()
	requireNS(t)
	opts.Spec.Action.Cwd = dir
	p, err := NewPool(context.Background(), &Rung{}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	waitReady(t, p, n)
	return p
}

func waitReady(t *testing.T, p *Pool, n int) {
	t.Helper()
	testwait.For(t, time.Minute, fmt.Sprintf("%d ready in the pool", n), func() bool { return p.Stats().Ready >= n })
}

func poolTrial(t *testing.T, p *Pool, dir string, argv ...string) *dryexec.StateDelta {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := p.Trial(ctx, dryexec.TrialSpec{Action: dryexec.Action{Argv: argv, Cwd: dir, Env: testPath}})
	if err != nil {
		t.Fatal(err)
	}
	validate(t, d)
	return d
}

// TestPoolAcceptance: a pooled trial gives exactly the core scenario's delta,
// from a sandbox that was ready before it was asked for.
func TestPoolAcceptance(t *testing.T) {
	dir := t.TempDir()
	if err := acceptance.MakeDir(dir); err != nil {
		t.Fatal(err)
	}
	p := newTestPool(t, dir, PoolOptions{Size: 1}, 1)
	d := poolTrial(t, p, dir, "sh", "-c", acceptance.Script)
	if err := acceptance.Check(d, dir); err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Hits != 1 || s.Misses != 0 {
		t.Fatalf("stats %+v, want one hit", s)
	}
}

// TestPoolSettles: a ready sandbox becomes settled once the guest says its
// command stub is started and waiting (trial.ready), never counted settled
// before it is ready; a settled sandbox runs its trial as a hit, and so does
// one taken as soon as it is ready, whose trial waits for the stub.
func TestPoolSettles(t *testing.T) {
	dir := t.TempDir()
	p := newTestPool(t, dir, PoolOptions{Size: 1}, 1)
	testwait.For(t, time.Minute, "the ready sandbox settled", func() bool {
		s := p.Stats()
		if s.Settled > s.Ready {
			t.Fatalf("stats %+v: more settled than ready", s)
		}
		return s.Settled == 1
	})
	if d := poolTrial(t, p, dir, "sh", "-c", "echo settled"); d.Process.Stdout != "settled\n" {
		t.Fatalf("stdout %q", d.Process.Stdout)
	}
	waitReady(t, p, 1)
	if d := poolTrial(t, p, dir, "sh", "-c", "echo taken"); d.Process.Stdout != "taken\n" {
		t.Fatalf("stdout %q", d.Process.Stdout)
	}
	if s := p.Stats(); s.Hits != 2 || s.Misses != 0 {
		t.Fatalf("stats %+v, want two hits", s)
	}
}

// TestPoolDeadGuestReplaced: a pooled sandbox whose guest died while it
// waited (killed here; the OOM killer elsewhere) is never handed to a trial
// (which then failed: "sending the command: broken pipe"): the trial runs
// cold, complete, and the dead sandbox is counted and replaced.
func TestPoolDeadGuestReplaced(t *testing.T) {
	dir := t.TempDir()
	p := newTestPool(t, dir, PoolOptions{Size: 1}, 1)
	testwait.For(t, time.Minute, "the ready sandbox settled", func() bool { return p.Stats().Settled == 1 })
	var pid int
	p.w.Each(func(tr *trial) { pid = tr.cmd.Process.Pid })
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		testreq.Needf(t, testreq.Kernel, "pidfd_open", err)
	}
	defer unix.Close(fd)
	if err := unix.Kill(pid, unix.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The marker: the guest's pidfd turns readable once it has died.
	if n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 60_000); n != 1 || err != nil {
		t.Fatalf("the killed guest did not die: %d, %v", n, err)
	}
	d := poolTrial(t, p, dir, "sh", "-c", "echo ran")
	if d.Incomplete || d.Process.Stdout != "ran\n" {
		t.Fatalf("incomplete %v (%q), stdout %q", d.Incomplete, d.IncompleteReason, d.Process.Stdout)
	}
	if s := p.Stats(); s.Hits != 0 || s.Misses != 1 {
		t.Fatalf("stats %+v: want the trial to run cold, the dead sandbox passed over", s)
	}
	waitReady(t, p, 1)
	if d := poolTrial(t, p, dir, "sh", "-c", "echo again"); d.Process.Stdout != "again\n" {
		t.Fatalf("stdout %q from the replacement", d.Process.Stdout)
	}
}

// TestPoolNothingCarriesOver: what one pooled trial leaves behind (files in
// the workspace and /tmp, a background process, a cgroup's counters, a
// network attempt) is not visible to the next trial from the same pool.
func TestPoolNothingCarriesOver(t *testing.T) {
	dir := t.TempDir()
	p := newTestPool(t, dir, PoolOptions{Size: 2}, 2)
	first := poolTrial(t, p, dir, "sh", "-c",
		`echo dirty > left; echo dirty > /tmp/dx-pool-left; (sleep 300 &) ; exec 3<>/dev/tcp/203.0.113.9/80 2>/dev/null; python3 -c 'import socket; socket.socket().connect_ex(("203.0.113.9", 80))'; true`)
	if len(first.Files) < 2 {
		t.Fatalf("first trial wrote %v", opPaths(first, ""))
	}
	waitReady(t, p, 1)
	second := poolTrial(t, p, dir, "sh", "-c",
		`test -e left && echo SAW-FILE; test -e /tmp/dx-pool-left && echo SAW-TMP; for c in /proc/[0-9]*/cmdline; do tr '\0' ' ' < $c; echo; done | grep -q 'sleep 30[0]' && echo SAW-PROC; echo checked`)
	if got := second.Process.Stdout; got != "checked\n" {
		t.Fatalf("second trial saw the first one's traces: %q (stderr %q)", got, second.Process.Stderr)
	}
	if len(second.Files) != 0 || len(second.Violations) != 0 {
		t.Fatalf("second trial: files %v violations %v", opPaths(second, ""), second.Violations)
	}
	for _, e := range second.Network {
		t.Errorf("second trial's network log holds %+v", e)
	}
	if s := p.Stats(); s.Hits != 2 {
		t.Fatalf("stats %+v, want two hits", s)
	}
}

// TestPoolOtherSandboxRunsCold: a trial asking for other limits than the
// template's does not get a pooled sandbox, and its limits hold.
func TestPoolOtherSandboxRunsCold(t *testing.T) {
	dir := t.TempDir()
	p := newTestPool(t, dir, PoolOptions{Size: 1}, 1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	d, err := p.Trial(ctx, dryexec.TrialSpec{Action: dryexec.Action{Argv: []string{"sh", "-c", "ulimit -n"}, Cwd: dir, Env: testPath},
		UpperSizeBytes: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if s := p.Stats(); s.Misses != 1 || s.Hits != 0 {
		t.Fatalf("stats %+v, want one miss", s)
	}
	big, err := p.Trial(ctx, dryexec.TrialSpec{Action: dryexec.Action{Argv: []string{"sh", "-c", "head -c 16M /dev/zero > big"}, Cwd: dir, Env: testPath},
		UpperSizeBytes: 8 << 20})
	if err != nil {
		t.Fatal(err)
	}
	if !hasViolation(big, "upper storage full") {
		t.Fatalf("a cold trial's upper size did not hold: %+v", big.Violations)
	}
	_ = d
}

func hasViolation(d *dryexec.StateDelta, detail string) bool {
	for _, v := range d.Violations {
		if strings.Contains(v.Detail, detail) {
			return true
		}
	}
	return false
}

// TestPoolClose: Close destroys the ready sandboxes (their guests are
// gone) and later trials are refused.
func TestPoolClose(t *testing.T) {
	dir := t.TempDir()
	p := newTestPool(t, dir, PoolOptions{Size: 2}, 2)
	var pids []int
	p.w.Each(func(tr *trial) { pids = append(pids, tr.cmd.Process.Pid) })
	p.Close()
	for _, pid := range pids {
		if _, err := os.Stat("/proc/" + strconv.Itoa(pid)); err == nil {
			t.Errorf("guest %d outlived Close", pid)
		}
	}
	_, err := p.Trial(context.Background(), dryexec.TrialSpec{Action: dryexec.Action{Argv: []string{"true"}, Cwd: dir, Env: testPath}})
	if !errors.Is(err, ErrPoolClosed) {
		t.Fatalf("trial after Close: %v", err)
	}
}

// TestPoolIdleTimeout: an idle pool lets its sandboxes go, and refills when
// it is asked again.
func TestPoolIdleTimeout(t *testing.T) {
	dir := t.TempDir()
	p := newTestPool(t, dir, PoolOptions{Size: 1, IdleTimeout: time.Second}, 1)
	testwait.For(t, time.Minute, "the idle pool to let its sandbox go", func() bool { return p.Stats().Ready == 0 })
	poolTrial(t, p, dir, "true")
	waitReady(t, p, 1)
}

// TestPoolIdleMemory reports what a ready sandbox costs.
func TestPoolIdleMemory(t *testing.T) {
	dir := t.TempDir()
	p := newTestPool(t, dir, PoolOptions{Size: 2}, 2)
	s := p.Stats()
	if s.IdlePSSBytes <= 0 {
		t.Fatalf("no memory figure: %+v", s)
	}
	t.Logf("idle memory of %d ready sandboxes: %d KiB Pss", s.Ready, s.IdlePSSBytes>>10)
}

// TestPoolNewSecretNotExposed: a credential that appears after a sandbox was
// prepared (masks are resolved from what exists) makes that sandbox stale:
// the trial does not get it, runs with the credential masked, and the read
// is reported.
func TestPoolNewSecretNotExposed(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	dir := t.TempDir()
	p := newTestPool(t, dir, PoolOptions{Size: 1}, 1)
	cred := home + "/.aws/credentials"
	if err := os.MkdirAll(home+"/.aws", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cred, []byte("aws_secret_access_key = SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := poolTrial(t, p, dir, "sh", "-c", "cat "+cred+"; echo end")
	if strings.Contains(d.Process.Stdout, "SECRET") {
		t.Fatalf("a pooled sandbox prepared before the credential existed showed it: %q", d.Process.Stdout)
	}
	if s := p.Stats(); s.Hits != 0 || s.Misses != 1 {
		t.Fatalf("stats %+v: the stale sandbox was handed out", s)
	}
	if !hasViolation(d, cred) && !hasViolation(d, home+"/.aws") {
		t.Fatalf("the read of the new credential was not reported: %+v", d.Violations)
	}
}

// TestPoolStaleReplaced: once the host has changed under a full pool (here
// a credential that appeared, which every trial now masks), the first trial
// misses and runs cold, and the pool replaces its stale sandboxes at once:
// the next trial gets a ready one. Without that, a full pool kept sandboxes
// no trial could use until it went idle (a daemon whose first sandboxes were
// made before its own socket existed ran every trial cold).
func TestPoolStaleReplaced(t *testing.T) {
	home := t.TempDir()
	t.Setenv("HOME", home)
	dir := t.TempDir()
	p := newTestPool(t, dir, PoolOptions{Size: 1}, 1)
	if err := os.MkdirAll(home+"/.aws", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(home+"/.aws/credentials", []byte("aws_secret_access_key = SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	poolTrial(t, p, dir, "true")
	if s := p.Stats(); s.Hits != 0 || s.Misses != 1 {
		t.Fatalf("stats %+v after the host changed: want the first trial cold", s)
	}
	waitReady(t, p, 1)
	poolTrial(t, p, dir, "true")
	if s := p.Stats(); s.Hits != 1 || s.Misses != 1 {
		t.Fatalf("stats %+v: the second trial did not get a sandbox made for the changed host", s)
	}
}

// TestPoolNewMountSeen: a mount made after a sandbox was prepared makes it
// stale (the pool's cached mount plan must notice), and the trial both sees
// the new mount's files and has its writes to it captured, not applied.
func TestPoolNewMountSeen(t *testing.T) {
	testreq.NeedRoot(t)
	dir := t.TempDir()
	p := newTestPool(t, dir, PoolOptions{Size: 1}, 1)
	// Twice: the first change is seen through the cached plan's poll, the
	// second proves the poll is armed again after a re-plan.
	for i := range 2 {
		mnt := dir + "/m" + strconv.Itoa(i)
		if err := os.Mkdir(mnt, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Mount("dryexec-test", mnt, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Unmount(mnt, unix.MNT_DETACH) })
		if err := os.WriteFile(mnt+"/f", []byte("on the new mount"), 0o644); err != nil {
			t.Fatal(err)
		}
		waitReady(t, p, 1)
		before := p.Stats()
		d := poolTrial(t, p, dir, "sh", "-c", "cat "+mnt+"/f; echo x > "+mnt+"/new")
		if d.Process.Stdout != "on the new mount" {
			t.Fatalf("trial %d: stdout %q: the new mount's file was not seen", i, d.Process.Stdout)
		}
		if len(d.Files) != 1 || d.Files[0].Path != mnt+"/new" || d.Files[0].Op != "create" {
			t.Fatalf("trial %d: files %+v, want the create of %s/new", i, d.Files, mnt)
		}
		if _, err := os.Stat(mnt + "/new"); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("trial %d: the write reached the host's new mount: %v", i, err)
		}
		if s := p.Stats(); s.Misses != before.Misses+1 {
			t.Fatalf("trial %d: stats %+v after %+v: the sandbox prepared before the mount was handed out", i, s, before)
		}
	}
}

// TestPoolCommandStubReady: a ready sandbox has its command's process
// started already (guest.cmdStub), and on amd64 that is the native stub, not
// the slower fallback; the trial then runs in it.
func TestPoolCommandStubReady(t *testing.T) {
	dir := t.TempDir()
	p := newTestPool(t, dir, PoolOptions{Size: 1}, 1)
	// The stub is a child of a guest that is a child of this process.
	stubs := func() []string {
		var exes []string
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			if _, err := strconv.Atoi(e.Name()); err != nil {
				continue
			}
			ppid := procPPid(e.Name())
			if ppid == 0 || procPPid(strconv.Itoa(ppid)) != os.Getpid() {
				continue
			}
			exe, _ := os.Readlink("/proc/" + e.Name() + "/exe")
			exes = append(exes, exe)
		}
		return exes
	}
	want, _ := os.Readlink("/proc/self/exe") // the fallback: the guest binary
	if runtime.GOARCH == "amd64" {
		want = "/memfd:dryexec-stub"
	}
	// Ready means trial.joined was sent: the guest starts its stub then (and
	// until it execs, the stub shows the guest's binary).
	ok := func(exes []string) bool { return len(exes) == 1 && strings.HasPrefix(exes[0], want) }
	var exes []string
	if testwait.Until(10*time.Second, func() bool { exes = stubs(); return ok(exes) }) != nil {
		t.Fatalf("grandchildren of the test while one sandbox is ready: %q, want one stub running %s", exes, want)
	}
	d := poolTrial(t, p, dir, "sh", "-c", "echo ran")
	if d.Process.Stdout != "ran\n" || d.Process.ExitCode != 0 {
		t.Fatalf("trial: exit %d, stdout %q", d.Process.ExitCode, d.Process.Stdout)
	}
}

// procPPid is the parent of /proc/pid, or 0.
func procPPid(pid string) int {
	b, err := os.ReadFile("/proc/" + pid + "/status")
	if err != nil {
		return 0
	}
	v, _ := procfs.Field(b, "PPid:")
	return int(v)
}
