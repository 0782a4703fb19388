package netrole

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/netsim"
	"github.com/dryexec/dryexec/netsim/netproc"
)

// attempts runs in the confined role (TestEscape): each tries something the
// role must not be able to do, and the results go back as MsgDone's Err,
// "name=result;…" (result "ok" when the attempt worked).
func attempts(out *sender, _ *json.Decoder) int {
	var res []string
	try := func(name string, err error) {
		r := "ok"
		if err != nil {
			r = err.Error()
		}
		res = append(res, name+"="+r)
	}
	// A host file everyone may read: refused by Landlock, not by its mode.
	f, err := os.Open("/etc/passwd")
	if err == nil {
		f.Close()
	}
	try("read-host-file", err)
	try("write-host-file", func() error {
		f, err := os.OpenFile(filepath.Join(os.TempDir(), "netproc-escape-"+time.Now().Format("150405.000000")), os.O_CREATE|os.O_WRONLY, 0o644)
		if err == nil {
			f.Close()
			os.Remove(f.Name())
		}
		return err
	}())
	_, err = syscall.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{})
	try("exec", err)
	try("ptrace-parent", func() error {
		err := unix.PtraceAttach(os.Getppid())
		if err == nil {
			unix.PtraceDetach(os.Getppid())
		}
		return err
	}())
	try("signal-parent", unix.Kill(os.Getppid(), 0))
	try("listen-on-host", func() error {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err == nil {
			l.Close()
		}
		return err
	}())
	// On a thread of its own, which ends with the goroutine: a thread in
	// another network namespace must not go back to the runtime.
	nsErr := make(chan error)
	go func() {
		runtime.LockOSThread()
		nsErr <- unix.Unshare(unix.CLONE_NEWNET)
	}()
	try("new-namespace", <-nsErr)
	out.send(netproc.Msg{Kind: netproc.MsgDone, Err: strings.Join(res, ";")})
	return 0
}

// startRole starts exe in the role with the default configuration and a
// hand-over socket nobody sends on.
func startRole(t *testing.T, exe string) *netproc.Proc {
	t.Helper()
	p, err := startRoleWith(t, netsim.Config{CADir: filepath.Join(t.TempDir(), "ca")}, exe)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// startRoleWith starts exe in the role with cfg and returns what Ready
// returned.
func startRoleWith(t *testing.T, cfg netsim.Config, exe string) (*netproc.Proc, error) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	guest := os.NewFile(uintptr(fds[1]), "guest")
	t.Cleanup(func() { guest.Close() })
	p, err := netproc.Start(cfg, os.NewFile(uintptr(fds[0]), "host"), exe)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Stop(); <-p.Done() })
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	return p, p.Ready(ctx)
}

// TestOpenAPIOnlyWhereLinked: a mock file naming an OpenAPI document is
// served by the role binary that links the OpenAPI mocks, which Start picks
// for such a file (dryexec-netsim-openapi, $DRYEXEC_NETSIM_OPENAPI: here the
// test binary under another name), and refused as a bad config, naming that
// binary, by one that does not (dryexec-netsim, the CLI re-executed). A mock
// file without one keeps the plain role.
func TestOpenAPIOnlyWhereLinked(t *testing.T) {
	dir := t.TempDir()
	spec, err := os.ReadFile("../mock/testdata/petstore.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "petstore.yaml"), spec, 0o644); err != nil {
		t.Fatal(err)
	}
	mocks := filepath.Join(dir, "mocks.yaml")
	if err := os.WriteFile(mocks, []byte("openapi:\n  - spec: petstore.yaml\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	routes := filepath.Join(dir, "routes.yaml")
	if err := os.WriteFile(routes, []byte("routes:\n  - path: /x\n    body: x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := netsim.Config{CADir: filepath.Join(t.TempDir(), "ca"), MockFile: mocks}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := startRoleWith(t, cfg, self); !errors.Is(err, netsim.ErrBadConfig) || !strings.Contains(err.Error(), netproc.OpenAPIExeName) {
		t.Errorf("a role without the OpenAPI mocks: Ready() = %v, want ErrBadConfig naming %s", err, netproc.OpenAPIExeName)
	}
	exe := filepath.Join(t.TempDir(), openAPIExe)
	if err := os.Symlink(self, exe); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(exe), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv(netproc.OpenAPIExeEnv, exe)
	if got := netproc.OpenAPIExecutable(); got != exe {
		t.Fatalf("OpenAPIExecutable() = %s, want %s", got, exe)
	}
	if _, err := startRoleWith(t, cfg, ""); err != nil {
		t.Errorf("Start picking the role for an OpenAPI mock file: Ready() = %v", err)
	}
	// A mock file without OpenAPI documents never starts the OpenAPI role
	// (here it would fail: it is made to).
	t.Setenv(netproc.OpenAPIExeEnv, filepath.Join(dir, "no-such-binary"))
	cfg.MockFile = routes
	if _, err := startRoleWith(t, cfg, ""); err != nil {
		t.Errorf("a mock file without OpenAPI documents: Ready() = %v", err)
	}
}

// TestConfinement: the role reports the confinement it runs under, and it
// is what docs/containment.md says: nobody and no capabilities where the
// parent is root (its own uid, which has none, otherwise), no_new_privs, the
// seccomp allow list, a Landlock domain where the kernel has Landlock.
func TestConfinement(t *testing.T) {
	p := startRole(t, "")
	c := p.Confinement()
	if !c.Seccomp || !c.NoNewPrivs || c.CapEff != 0 {
		t.Errorf("confinement %+v: want seccomp, no_new_privs and no capabilities", c)
	}
	wantUID := os.Getuid()
	if wantUID == 0 {
		wantUID = nobody
	}
	if c.UID != wantUID {
		t.Errorf("the role runs as uid %d, want %d", c.UID, wantUID)
	}
	if _, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION); e == 0 && c.Landlock == 0 {
		t.Errorf("the kernel has Landlock and the role runs outside a domain: %+v", c)
	}
}

// TestEscape: from inside the confined role, reading or writing a host
// file, starting a program, tracing or signalling the parent, listening on
// a host port and making a namespace are all refused. Without the
// confinement (no Landlock, no uid drop, no seccomp) each of them works.
func TestEscape(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(t.TempDir(), escapeExe)
	if err := os.Symlink(self, exe); err != nil {
		t.Fatal(err)
	}
	// The role runs as nobody when we are root: it must be able to reach
	// the binary through the link's directory.
	if err := os.Chmod(filepath.Dir(exe), 0o755); err != nil {
		t.Fatal(err)
	}
	p := startRole(t, exe)
	<-p.Done()
	err = p.Err()
	if err == nil || errors.Is(err, netproc.ErrCrashed) {
		t.Fatalf("the role's attempts ended with %v", err)
	}
	got := map[string]string{}
	for _, kv := range strings.Split(err.Error(), ";") {
		k, v, _ := strings.Cut(kv, "=")
		got[k] = v
	}
	for _, name := range []string{"read-host-file", "write-host-file", "exec", "ptrace-parent", "signal-parent", "listen-on-host", "new-namespace"} {
		r, ok := got[name]
		switch {
		case !ok:
			t.Errorf("%s: not attempted (%s)", name, err)
		case r == "ok":
			t.Errorf("%s: the confined role could do it", name)
		default:
			t.Logf("%s: refused: %s", name, r)
		}
	}
}

// TestKilled: a role killed while it serves ends its network with
// ErrCrashed, and the parent goes on.
func TestKilled(t *testing.T) {
	p := startRole(t, "")
	if err := syscall.Kill(p.Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	// Quiet closes right after Done (Done first, so that a Quiet waiter
	// that finds Done open knows the role did not die first): a role that
	// died is quiet too, or this waits until the test's deadline.
	<-p.Quiet()
	if err := p.Err(); !errors.Is(err, netproc.ErrCrashed) || !strings.Contains(err.Error(), "killed") {
		t.Errorf("Err() = %v, want ErrCrashed saying it was killed", err)
	}
}

// BenchmarkStartStop: a role started (to ready: the Sim made, confined) and
// stopped, with no sandbox: the fixed cost a trial's network adds. Set
// DRYEXEC_NETSIM to measure the role-only binary instead of this one.
func BenchmarkStartStop(b *testing.B) {
	caDir := filepath.Join(b.TempDir(), "ca")
	for b.Loop() {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			b.Fatal(err)
		}
		p, err := netproc.Start(netsim.Config{CADir: caDir}, os.NewFile(uintptr(fds[0]), "host"), "")
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Ready(b.Context()); err != nil {
			b.Fatal(err)
		}
		p.Stop()
		<-p.Done()
		unix.Close(fds[1])
	}
}

// lateRecordCount is how many events lateRecords logs.
const lateRecordCount = 2000

// lateRecords runs in the role (TestSyncHasEveryEvent): once ready it logs
// lateRecordCount events, then answers the parent's syncs as a serving
// role does, until the parent stops it.
func lateRecords(out *sender, dec *json.Decoder) int {
	for i := range lateRecordCount {
		out.send(netproc.Msg{Kind: netproc.MsgRecord, Kept: true, Record: &netsim.Record{NetworkEvent: dryexec.NetworkEvent{Proto: "tcp", Host: "10.0.0.1", Port: i, Action: "blocked"}}})
	}
	control(dec, out)
	out.send(netproc.Msg{Kind: netproc.MsgDone})
	return 0
}

// TestSyncHasEveryEvent: events cross two queues between the role's log and
// Log (the role's sender, this process's reader), so Log read the moment a
// command saw netsim's answer could lack them: a session exec's network
// list missed its own blocked connect. Sync returns only once Log holds
// every event the role had logged before it read the sync: here, all the
// events the role logs before it reads anything.
func TestSyncHasEveryEvent(t *testing.T) {
	exe := filepath.Join(t.TempDir(), syncExe)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(self, exe); err != nil {
		t.Fatal(err)
	}
	// The role runs as nobody when we are root: it must be able to reach
	// the binary through the link's directory.
	if err := os.Chmod(filepath.Dir(exe), 0o755); err != nil {
		t.Fatal(err)
	}
	p := startRole(t, exe)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	for range 3 {
		if err := p.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		if n := len(p.Log()); n != lateRecordCount {
			t.Fatalf("after Sync the log holds %d events, want %d", n, lateRecordCount)
		}
	}
	p.Stop()
	if err := p.Sync(ctx); err != nil {
		t.Fatalf("Sync after Stop: %v", err)
	}
}
