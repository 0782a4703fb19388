package netsim_test

import (
	"context"
	"net"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/dryexec/dryexec/netsim"
	"github.com/dryexec/dryexec/netsim/tun"
	"golang.org/x/sys/unix"
)

// TestIPv6Intercepted: a literal IPv6 destination goes through netsim too.
func TestIPv6Intercepted(t *testing.T) {
	sim := newSim(t, netsim.Config{}, map[string]string{"mocks.yaml": "routes:\n  - host: 2001:db8::7\n    body: six\n"})
	res := runSandbox(t, sim, sandboxOpts{}, "curl", "-sS", "-g", "http://[2001:db8::7]/")
	if res.stdout != "six" {
		t.Fatalf("stdout %q stderr %s log %s", res.stdout, res.stderr, dumpLog(t, sim.Log()))
	}
}

// TestServeLeaksNothing: after a sandbox's network ends, netsim's
// goroutines (stack, handlers, DNS sockets, HTTP server) are gone.
func TestServeLeaksNothing(t *testing.T) {
	before := runtime.NumGoroutine()
	sim := newSim(t, netsim.Config{}, map[string]string{"mocks.yaml": mockFile})
	runSandbox(t, sim, sandboxOpts{env: trustEnv}, "sh", "-c",
		"curl -sS http://api.example.com/users/1 https://secure.example.com/v1/x; /usr/bin/python3 -c 'import socket; socket.create_connection((\"203.0.113.7\", 80)).close()'")
	if len(sim.Log()) < 4 {
		t.Fatalf("too little traffic: %s", dumpLog(t, sim.Log()))
	}
	deadline := time.Now().Add(10 * time.Second)
	for runtime.NumGoroutine() > before+1 {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines before, %d after:\n%s", before, runtime.NumGoroutine(), buf[:runtime.Stack(buf, true)])
		}
		runtime.Gosched()
		time.Sleep(10 * time.Millisecond)
	}
}

// TestServeStopsOnCancel: cancelling the context ends Serve while the
// sandbox still lives, and the sandbox's network is then dead. Quiet is
// closed by then, and not before.
func TestServeStopsOnCancel(t *testing.T) {
	sim := newSim(t, netsim.Config{}, map[string]string{"mocks.yaml": mockFile})
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	hostEnd, guestEnd := os.NewFile(uintptr(fds[0]), "host"), os.NewFile(uintptr(fds[1]), "guest")
	defer hostEnd.Close()
	cmd := exec.Command("/proc/self/exe", "-test.run=^$", "--", "sleep", "60")
	cmd.Env = []string{roleEnv + "=" + roleSandbox, "PATH=/usr/bin:/bin"}
	cmd.ExtraFiles = []*os.File{guestEnd}
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	guestEnd.Close()
	c, _ := net.FileConn(hostEnd)
	defer c.Close()
	dev, err := tun.RecvFD(c.(*net.UnixConn))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- sim.ServeTUN(ctx, dev) }()
	select {
	case <-sim.Quiet():
		t.Fatal("Quiet before Serve was stopped")
	case <-time.After(50 * time.Millisecond):
	}
	cancel()
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	select {
	case <-sim.Quiet():
	default:
		t.Fatal("Serve returned but Quiet is not closed")
	}
	if err := sim.Serve(context.Background(), nopLink{}); err != netsim.ErrServed {
		t.Fatalf("second Serve: %v", err)
	}
}

type nopLink struct{}

func (nopLink) Read([]byte) (int, error)    { return 0, net.ErrClosed }
func (nopLink) Write(p []byte) (int, error) { return len(p), nil }
func (nopLink) Close() error                { return nil }
