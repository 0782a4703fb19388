package firecracker

import (
	"context"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"reflect"
	"testing"

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
	l := &inProcess{opt: fctest.Options{Backend: func(st fctest.Started) (map[uint32]func(net.Conn), error) {
		got = st
		guest := map[uint32]func(net.Conn){}
		for _, p := range VsockPorts() {
			guest[p] = func(c net.Conn) { fmt.Fprintf(c, "port %d\n", p); c.Close() }
		}
		return guest, nil
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
	l2 := &inProcess{opt: fctest.Options{Backend: func(fctest.Started) (map[uint32]func(net.Conn), error) {
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
