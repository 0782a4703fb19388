package firecracker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/dryexec/dryexec/rung/vm/firecracker/fctest"
)

// TestFakeBackend: a fake with a Backend hands it, at InstanceStart, the
// VM the API configured (paths as the host sees them, drives in id
// order), serves the guest ports it returns on the vsock, and ends as
// Firecracker does when the backend's VM resets; a backend's error
// refuses the start in Firecracker's words, and the vsock socket goes.
func TestFakeBackend(t *testing.T) {
	dir := shortDir(t)
	files(t, dir, "vmlinux", "initrd", "root.img", "scratch.img")
	var got fctest.Started
	l := &inProcess{opt: fctest.Options{Backend: func(st fctest.Started) (*fctest.BackendVM, error) {
		got = st
		return &fctest.BackendVM{Guest: portGuest()}, nil
	}}}
	ctx := context.Background()
	m, err := Launch(ctx, LaunchSpec{Binary: "firecracker", APISock: filepath.Join(dir, "api")}, Options{Launcher: l})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	cfg := vmConfig(dir)
	if err := m.Boot(ctx, cfg); err != nil {
		t.Fatal(err)
	}
	want := fctest.Started{Kernel: cfg.Boot.KernelImagePath, Initrd: cfg.Boot.InitrdPath, BootArgs: cfg.Boot.BootArgs, VCPUs: 1, MemMiB: 256,
		Drives: []fctest.StartedDrive{{ID: "root", Path: filepath.Join(dir, "root.img"), ReadOnly: true}, {ID: "scratch", Path: filepath.Join(dir, "scratch.img")}}}
	reset := got.Reset
	got.Reset = nil
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the backend got %+v, want %+v", got, want)
	}
	checkStreams(t, m.Transport())
	reset()
	<-m.Process().Done()
	noViolations(t, l.all())

	// A backend that cannot boot refuses the start.
	dir2 := shortDir(t)
	files(t, dir2, "vmlinux", "initrd", "root.img", "scratch.img")
	l2 := &inProcess{opt: fctest.Options{Backend: func(fctest.Started) (*fctest.BackendVM, error) {
		return nil, errors.New("no QEMU")
	}}}
	m2, err := Launch(ctx, LaunchSpec{Binary: "firecracker", APISock: filepath.Join(dir2, "api")}, Options{Launcher: l2})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	var ae *APIError
	if err := m2.Boot(ctx, vmConfig(dir2)); !errors.As(err, &ae) || ae.FaultMessage != "Start microvm error: no QEMU" {
		t.Fatalf("boot with a failing backend: %v", err)
	}
	if _, err := Dial(ctx, filepath.Join(dir2, "v.sock"), VsockPortBase); err == nil {
		t.Error("the vsock socket is there after a refused start")
	}
}

// portGuest is a guest whose every wire port names itself, then holds
// the connection until the host's end.
func portGuest() map[uint32]func(net.Conn) {
	guest := map[uint32]func(net.Conn){}
	for _, p := range VsockPorts() {
		guest[p] = func(c net.Conn) {
			fmt.Fprintf(c, "port %d\n", p)
			io.Copy(io.Discard, c)
			c.Close()
		}
	}
	return guest
}

// savedVM is a backend whose VM's state is a counter: its pauses, resumes
// and saves are recorded, a save writes the counter to the memory file and
// a restore reads it back, so that the test sees what the fake asked of
// the backend and that the restored VM is the saved one.
type savedVM struct {
	mu     sync.Mutex
	events []string
	starts []fctest.Started
}

func (b *savedVM) backend(st fctest.Started) (*fctest.BackendVM, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	st.Reset = nil
	b.starts = append(b.starts, st)
	counter := 41
	if st.Restore != "" {
		raw, err := os.ReadFile(st.Restore)
		if err != nil {
			return nil, err
		}
		if counter, err = strconv.Atoi(string(raw)); err != nil {
			return nil, fmt.Errorf("not a saved VM: %w", err)
		}
		b.events = append(b.events, "restored "+string(raw))
	}
	note := func(e string) func() error {
		return func() error { b.mu.Lock(); b.events = append(b.events, e); b.mu.Unlock(); return nil }
	}
	return &fctest.BackendVM{Guest: portGuest(), Pause: note("pause"), Resume: note("resume"),
		Save: func(mem string) error {
			b.mu.Lock()
			b.events = append(b.events, "save")
			b.mu.Unlock()
			return os.WriteFile(mem, []byte(strconv.Itoa(counter+1)), 0o600)
		}}, nil
}

// TestFakeBackendPark: with a Backend, a park pauses the backend's VM and
// saves it to the snapshot's memory file, closes the vsock's connections
// (Firecracker resets its transport on a snapshot), and a restore in a
// fresh process hands the backend that memory file with the configuration
// the VM was saved with, its vsock bound where vsock_override says; the
// load is the new process's only configuration, none refused.
func TestFakeBackendPark(t *testing.T) {
	dir := shortDir(t)
	files(t, dir, "vmlinux", "initrd", "root.img", "scratch.img")
	b := &savedVM{}
	l := &inProcess{opt: fctest.Options{Backend: b.backend}}
	ctx := context.Background()
	spec := LaunchSpec{Binary: "firecracker", APISock: filepath.Join(dir, "api")}
	m, err := Launch(ctx, spec, Options{Launcher: l})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Boot(ctx, vmConfig(dir)); err != nil {
		t.Fatal(err)
	}
	// A stream the host keeps open through the park: the snapshot's
	// transport reset ends it.
	held, err := Dial(ctx, filepath.Join(dir, "v.sock"), VsockPortBase)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if line, _ := bufio.NewReader(held).ReadString('\n'); line != fmt.Sprintf("port %d\n", VsockPortBase) {
		t.Fatalf("the held stream: %q", line)
	}
	snap, err := m.Park(ctx, Snapshot{StatePath: filepath.Join(dir, "vm.snap"), MemPath: filepath.Join(dir, "vm.mem")})
	if err != nil {
		t.Fatal(err)
	}
	// The deadline only keeps a fake that does not reset from hanging the
	// test: the reset comes with the snapshot, before Park returns.
	held.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, err := held.Read(make([]byte, 1)); err == nil || errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("the stream held through the snapshot: read %d bytes (%v), want its end", n, err)
	}
	// Another run dir: the parked VM's is gone when it is restored.
	dir2 := shortDir(t)
	snap.VsockOverride = filepath.Join(dir2, "v2.sock")
	m2, err := Restore(ctx, LaunchSpec{Binary: "firecracker", APISock: filepath.Join(dir2, "api")}, snap, Options{Launcher: l})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	checkStreams(t, m2.Transport())
	if got := m2.Transport().(VsockTransport).UDSPath; got != snap.VsockOverride {
		t.Errorf("the restored VM's vsock is at %s, want %s", got, snap.VsockOverride)
	}
	b.mu.Lock()
	events, starts := slices.Clone(b.events), slices.Clone(b.starts)
	b.mu.Unlock()
	if want := []string{"pause", "save", "restored 42"}; !slices.Equal(events, want) {
		t.Errorf("the backend was asked %q, want %q", events, want)
	}
	if len(starts) != 2 || starts[1].Restore != snap.MemPath || !starts[1].Resume || starts[0].Restore != "" {
		t.Fatalf("the backend's starts: %+v", starts)
	}
	boot := starts[0]
	boot.Restore, boot.Resume = starts[1].Restore, starts[1].Resume
	if !reflect.DeepEqual(boot, starts[1]) {
		t.Errorf("restored with %+v, want the saved VM's configuration %+v", starts[1], boot)
	}
	calls := l.all()
	want := []string{"GET /", "PUT /machine-config", "PUT /boot-source", "PUT /drives/root", "PUT /drives/scratch", "PUT /vsock", "PUT /actions",
		"PATCH /vm", "PUT /snapshot/create", "GET /", "PUT /snapshot/load"}
	if got := routes(calls); !slices.Equal(got, want) {
		t.Errorf("requests:\n got %v\nwant %v", got, want)
	}
	if o := calls[len(calls)-1].Body["vsock_override"]; !reflect.DeepEqual(o, map[string]any{"uds_path": snap.VsockOverride}) {
		t.Errorf("the load's vsock_override: %v", o)
	}
	noViolations(t, calls)
}
