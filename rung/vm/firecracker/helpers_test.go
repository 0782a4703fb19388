package firecracker

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/dryexec/dryexec/rung/vm/firecracker/fctest"
)

// fakeEnv makes the test binary stand in for the firecracker binary: a
// child started with it set runs fctest.Main instead of the tests.
const fakeEnv = "DRYEXEC_TEST_AS_FIRECRACKER"

func TestMain(m *testing.M) {
	if os.Getenv(fakeEnv) == "1" {
		os.Exit(fctest.Main(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// shortDir is a temp dir with a path short enough for unix sockets (108
// bytes), which t.TempDir's long names can exceed.
func shortDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("", "fc")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}

// files makes the inputs Firecracker opens (kernel, initrd, drives) as
// empty files in dir.
func files(t *testing.T, dir string, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(dir, n), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// inProcess is a Launcher whose "process" is an fctest.Server in this
// process, serving real HTTP on the spec's socket: the process is
// substituted, the HTTP is not.
type inProcess struct {
	opt fctest.Options
	// setup, when set, prepares each new server (its guest listeners).
	setup func(*fctest.Server)

	mu      sync.Mutex
	servers []*fctest.Server
}

func (l *inProcess) Launch(ctx context.Context, spec LaunchSpec) (Process, error) {
	if _, err := spec.Argv(); err != nil {
		return nil, err
	}
	opt := l.opt
	if spec.Jailer != nil {
		// What the jailer does before it execs Firecracker: the jail, in
		// which the API socket and every path of a request are.
		opt.Root = spec.ChrootDir()
		if err := os.MkdirAll(filepath.Dir(spec.HostAPISock()), 0o755); err != nil {
			return nil, err
		}
	}
	s, err := fctest.Listen(spec.HostAPISock(), opt)
	if err != nil {
		return nil, err
	}
	if l.setup != nil {
		l.setup(s)
	}
	l.mu.Lock()
	l.servers = append(l.servers, s)
	l.mu.Unlock()
	return serverProcess{s}, nil
}

// last is the newest server.
func (l *inProcess) last() *fctest.Server {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.servers[len(l.servers)-1]
}

// all are the servers' calls, in launch order.
func (l *inProcess) all() []fctest.Call {
	l.mu.Lock()
	defer l.mu.Unlock()
	var calls []fctest.Call
	for _, s := range l.servers {
		calls = append(calls, s.Calls()...)
	}
	return calls
}

type serverProcess struct{ s *fctest.Server }

func (p serverProcess) Pid() int              { return os.Getpid() }
func (p serverProcess) Done() <-chan struct{} { return p.s.Exited() }
func (p serverProcess) Err() error            { return nil }
func (p serverProcess) Kill() error           { return p.s.Close() }

// noViolations fails the test for every request the fake found against
// the spec or the order.
func noViolations(t *testing.T, calls []fctest.Call) {
	t.Helper()
	for _, c := range calls {
		if c.Violation {
			t.Errorf("violation: %s %s %v → %d %q", c.Method, c.Path, c.Body, c.Status, c.Fault)
		}
	}
}

// routes lists the calls as "METHOD PATH".
func routes(calls []fctest.Call) []string {
	var out []string
	for _, c := range calls {
		out = append(out, c.Method+" "+c.Path)
	}
	return out
}

// guestPorts serves every wire port in s like a guest: it names its port,
// reads to end-of-file, then says how many bytes it got and closes.
func guestPorts(s *fctest.Server) {
	for _, port := range VsockPorts() {
		s.ServeGuest(port, func(c net.Conn) { echoGuest(c, port) })
	}
}
