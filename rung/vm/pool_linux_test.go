package vm_test

import (
	"bufio"
	"context"
	"fmt"
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
	"github.com/dryexec/dryexec/internal/procfs"
	"github.com/dryexec/dryexec/internal/rungcompare"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/internal/testwait"
	"github.com/dryexec/dryexec/rung/vm"
)

// poolRung is a vm rung on the static guest, skipping (or, where required,
// failing) the test where no VM boots.
func poolRung(t *testing.T) *vm.Rung {
	t.Helper()
	if testing.Short() {
		t.Skip("boots VMs")
	}
	r := &vm.Rung{GuestExe: vm.StaticGuest(t)}
	testreq.Need(t, testreq.VM, r.Available(context.Background()))
	return r
}

// bootWait bounds the wait for a pooled VM: a boot under TCG on a loaded
// host took up to 35 s here; the pool may boot two one after the other.
const bootWait = 5 * time.Minute

// waitReady waits until p has a VM ready and nothing booting or in use.
func waitReady(t *testing.T, p *vm.Pool) {
	t.Helper()
	testwait.For(t, bootWait, "a pooled VM ready", func() bool { s := p.Stats(); return s.Ready == 1 && s.Busy == 0 })
}

func poolTrial(t *testing.T, r dryexec.Rung, spec dryexec.TrialSpec) *dryexec.StateDelta {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*bootWait)
	defer cancel()
	d, err := r.Trial(ctx, spec)
	if err != nil {
		t.Fatalf("%T trial: %v", r, err)
	}
	return d
}

// descendants are this process's children (zombies included) that were not
// in before.
func newChildren(before []int) []int {
	return slices.DeleteFunc(procfs.Children(os.Getpid(), func(string, []string) bool { return true }),
		func(p int) bool { return slices.Contains(before, p) })
}

// TestPool: a trial that takes a pooled VM gets the delta a cold trial
// gets (field by field, timing aside); a pooled VM whose QEMU was killed is
// not handed out (the trial runs cold) and is replaced; Close leaves no
// QEMU, netsim process, socket or zombie behind.
func TestPool(t *testing.T) {
	r := poolRung(t)
	dir := t.TempDir()
	for name, body := range map[string]string{"old": "old\n", "keep": "keep\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	before := newChildren(nil)
	socks := sockets(t)
	env := map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "X": "from the caller"}
	tmpl := dryexec.TrialSpec{Action: dryexec.Action{Cwd: "/", Env: map[string]string{"PATH": "/bin"}}}
	p, err := vm.NewPool(context.Background(), r, dryexec.PoolOptions{Size: 1, IdleTimeout: -1, Spec: tmpl})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			p.Close()
		}
	}()
	waitReady(t, p)

	// The command, cwd, env and stdin are the trial's own, not the
	// template's.
	spec := dryexec.TrialSpec{Action: dryexec.Action{Cwd: dir, Env: env, Argv: []string{"sh", "-c",
		`echo out; echo err >&2; cat > in; echo new > new; rm old; mkdir d; chmod 600 keep; ln -s new link; printf %s "$X" > env; pwd; exit 3`}}}
	var dh *dryexec.StateDelta
	for attempt := 1; ; attempt++ {
		hot := spec
		hot.Stdin = strings.NewReader("stdin\n")
		dh = poolTrial(t, p, hot)
		if s := p.Stats(); s.Hits == 1 {
			break
		} else if attempt == 3 {
			t.Fatalf("no trial took the pooled VM: %+v", s)
		}
		// A miss: the host's mount plan changed between the VM's boot
		// and the trial (other tests' mounts come and go on a shared
		// host), so the VM was stale and the trial ran cold, as it must.
		t.Logf("attempt %d missed the pool (the host's mounts changed?): %+v", attempt, p.Stats())
		waitReady(t, p)
	}
	if !strings.Contains(strings.Join(dh.Warnings, "\n"), "booted ahead in the warm pool") {
		t.Errorf("the pooled trial's warnings do not say so: %q", dh.Warnings)
	}
	cold := spec
	cold.Stdin = strings.NewReader("stdin\n")
	dc := poolTrial(t, r, cold)
	if dh.Process.ExitCode != 3 || dh.Incomplete || dh.Process.Stdout != "out\n"+dir+"\n" {
		t.Fatalf("pooled trial: exit %d incomplete %v (%s) stdout %q", dh.Process.ExitCode, dh.Incomplete, dh.IncompleteReason, dh.Process.Stdout)
	}
	if diff := rungcompare.DiffFields(rungcompare.Of(dh, dir, nil), rungcompare.Of(dc, dir, nil), "pooled", "cold"); diff != "" {
		t.Errorf("a pooled VM's delta differs from a cold one's:\n%s", diff)
	}
	if dh.TrialID == dc.TrialID || dh.TrialID == "" {
		t.Errorf("trial ids %q and %q", dh.TrialID, dc.TrialID)
	}

	// Kill the ready VM's QEMU: the next trial must not get it.
	waitReady(t, p)
	misses := p.Stats().Misses
	q := qemuChildren(t)
	if len(q) != 1 {
		t.Fatalf("QEMU children %v, want the pooled one", q)
	}
	syscall.Kill(q[0], syscall.SIGKILL)
	testwait.For(t, time.Minute, "the killed QEMU reaped", func() bool { return !slices.Contains(qemuChildren(t), q[0]) })
	d := poolTrial(t, p, dryexec.TrialSpec{Action: dryexec.Action{Cwd: dir, Env: env, Argv: []string{"sh", "-c", "echo ok > ok"}}})
	if d.Process.ExitCode != 0 || d.Incomplete || len(d.Files) != 1 {
		t.Fatalf("trial after the kill: exit %d incomplete %v (%s) files %+v", d.Process.ExitCode, d.Incomplete, d.IncompleteReason, d.Files)
	}
	if s := p.Stats(); s.Hits != 1 || s.Misses != misses+1 {
		t.Errorf("the killed VM was handed out: %+v", s)
	}
	if strings.Contains(strings.Join(d.Warnings, "\n"), "warm pool") {
		t.Errorf("the trial after the kill says it was pooled: %q", d.Warnings)
	}
	waitReady(t, p)
	if q2 := qemuChildren(t); len(q2) != 1 || q2[0] == q[0] {
		t.Fatalf("QEMU children after the refill %v (the killed one was %d)", q2, q[0])
	}

	// Close while a VM is ready: nothing is left.
	p.Close()
	closed = true
	if left := newChildren(before); len(left) > 0 {
		t.Errorf("processes left after Close: %v", left)
	}
	if n := sockets(t); n > socks {
		t.Errorf("%d sockets open after Close, %d before", n, socks)
	}
	if _, err := p.Trial(context.Background(), spec); err == nil {
		t.Error("a closed pool ran a trial")
	}
}

// TestPoolCloseWhileBooting: Close during a pooled VM's boot kills it; no
// QEMU or netsim process is left.
func TestPoolCloseWhileBooting(t *testing.T) {
	r := poolRung(t)
	before := newChildren(nil)
	p, err := vm.NewPool(context.Background(), r, dryexec.PoolOptions{Size: 1, IdleTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	testwait.For(t, time.Minute, "QEMU started", func() bool { return len(qemuChildren(t)) == 1 })
	if s := p.Stats(); s.Ready != 0 {
		t.Skipf("the VM booted before Close could interrupt it: %+v", s)
	}
	p.Close()
	if left := newChildren(before); len(left) > 0 {
		t.Errorf("processes left after Close: %v", left)
	}
}

// TestPoolOwnerKilled: the process that keeps a pool (a daemon) is
// SIGKILLed with a VM ready; the VM's QEMU and netsim die with it
// (Pdeathsig, kept across the view guest's exec of QEMU), so nothing of the
// pool outlives it. Its VMs hold nothing else on the host: their mounts are
// in the view guest's namespace, their sockets are socketpairs.
func TestPoolOwnerKilled(t *testing.T) {
	if os.Getenv("DRYEXEC_TEST_POOL_OWNER") != "" {
		return
	}
	r := poolRung(t)
	ctx, cancel := context.WithTimeout(context.Background(), bootWait)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestPoolOwnerChild$", "-test.v")
	cmd.Env = append(os.Environ(), "DRYEXEC_TEST_POOL_OWNER="+r.GuestExe)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var pids []int
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "POOL READY "); ok {
			for _, f := range strings.Fields(rest) {
				pid, _ := strconv.Atoi(f)
				pids = append(pids, pid)
			}
			break
		}
	}
	if len(pids) < 2 {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("the child reported no ready VM: %v", sc.Err())
	}
	cmd.Process.Kill()
	cmd.Wait()
	for _, pid := range pids {
		testwait.For(t, time.Minute, fmt.Sprintf("process %d ended with its owner", pid), func() bool {
			b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
			return err != nil || strings.Contains(string(b), ") Z ")
		})
	}
}

// TestPoolOwnerChild is TestPoolOwnerKilled's pool owner: it prints its
// ready VM's QEMU and netsim pids and waits to be killed.
func TestPoolOwnerChild(t *testing.T) {
	exe := os.Getenv("DRYEXEC_TEST_POOL_OWNER")
	if exe == "" {
		t.Skip("TestPoolOwnerKilled's child")
	}
	p, err := vm.NewPool(context.Background(), &vm.Rung{GuestExe: exe}, dryexec.PoolOptions{Size: 1, IdleTimeout: -1})
	if err != nil {
		t.Fatal(err)
	}
	waitReady(t, p)
	var pids []string
	for _, pid := range newChildren(nil) {
		pids = append(pids, strconv.Itoa(pid))
	}
	fmt.Printf("POOL READY %s\n", strings.Join(pids, " "))
	select {}
}

// TestPoolStaleReplaced: once the host has changed under a full pool (a
// credential that appeared, which every trial now masks), the first trial
// misses and runs cold, and the pool boots a VM for the changed host at
// once: the next trial takes it. A full pool used to keep the stale VM
// until it went idle, and every trial meanwhile booted cold.
func TestPoolStaleReplaced(t *testing.T) {
	r := poolRung(t)
	home := t.TempDir()
	t.Setenv("HOME", home)
	tmpl := dryexec.TrialSpec{Action: dryexec.Action{Cwd: "/", Env: map[string]string{"PATH": "/bin"}}}
	p, err := vm.NewPool(context.Background(), r, dryexec.PoolOptions{Size: 1, IdleTimeout: -1, Spec: tmpl})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	waitReady(t, p)
	if err := os.MkdirAll(home+"/.aws", 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(home+"/.aws/credentials", []byte("SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	spec := dryexec.TrialSpec{Action: dryexec.Action{Cwd: "/", Env: map[string]string{"PATH": "/bin"}, Argv: []string{"true"}}}
	poolTrial(t, p, spec)
	if s := p.Stats(); s.Hits != 0 || s.Misses != 1 {
		t.Fatalf("stats %+v after the host changed: want the first trial cold", s)
	}
	waitReady(t, p)
	poolTrial(t, p, spec)
	if s := p.Stats(); s.Hits != 1 {
		t.Fatalf("stats %+v: the second trial did not take a VM booted for the changed host", s)
	}
}
