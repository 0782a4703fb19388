package firecracker

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec/rung/vm/firecracker/fctest"
)

// vmConfig is a VM with a read-only root drive, a scratch drive and the
// wire's vsock, in dir.
func vmConfig(dir string) Config {
	p := func(n string) string { return filepath.Join(dir, n) }
	return Config{
		Machine: MachineConfig{VCPUCount: 1, MemSizeMiB: 256},
		Boot:    BootSource{KernelImagePath: p("vmlinux"), InitrdPath: p("initrd"), BootArgs: "console=ttyS0 reboot=k panic=1"},
		Drives: []Drive{
			{DriveID: "root", PathOnHost: p("root.img"), IsRootDevice: true, IsReadOnly: true},
			{DriveID: "scratch", PathOnHost: p("scratch.img")},
		},
		Vsock: &Vsock{GuestCID: 3, UDSPath: p("v.sock")},
	}
}

// checkStreams opens the wire's streams and checks each reaches its port.
func checkStreams(t *testing.T, tr Transport) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	streams, err := tr.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i, st := range streams {
		if line, _ := bufio.NewReader(st).ReadString('\n'); line != fmt.Sprintf("port %d\n", VsockPortBase+i) {
			t.Errorf("stream %d reached %q", i, line)
		}
		st.Close()
	}
}

// TestMachinePark: boot, park (pause + full snapshot + the process ended),
// restore into a fresh process (load with resume_vm, nothing configured
// before it), shut down: each request in Firecracker's order, none
// refused, the wire's streams working before and after.
func TestMachinePark(t *testing.T) {
	dir := shortDir(t)
	files(t, dir, "vmlinux", "initrd", "root.img", "scratch.img")
	l := &inProcess{setup: guestPorts}
	ctx := context.Background()
	spec := LaunchSpec{Binary: "firecracker", APISock: filepath.Join(dir, "api.sock"), ID: "vm-1"}
	m, err := Launch(ctx, spec, Options{Launcher: l})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Boot(ctx, vmConfig(dir)); err != nil {
		t.Fatal(err)
	}
	checkStreams(t, m.Transport())
	snap, err := m.Park(ctx, Snapshot{StatePath: filepath.Join(dir, "vm.snap"), MemPath: filepath.Join(dir, "vm.mem")})
	if err != nil {
		t.Fatal(err)
	}
	// Parked: no process, no sockets; the snapshot on disk.
	select {
	case <-l.last().Exited():
	default:
		t.Error("the parked VM's process still runs")
	}
	for _, p := range []string{spec.APISock, filepath.Join(dir, "v.sock")} {
		if _, err := os.Lstat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left behind by the park (%v)", p, err)
		}
	}
	for _, p := range []string{snap.StatePath, snap.MemPath} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("snapshot file: %v", err)
		}
	}
	if snap.VsockUDS != filepath.Join(dir, "v.sock") {
		t.Errorf("the snapshot's vsock socket is %q", snap.VsockUDS)
	}
	// A stale socket file where the restored VM binds its vsock, as a
	// process killed before it could clean up leaves: Restore removes it.
	if err := os.WriteFile(snap.VsockUDS, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	m2, err := Restore(ctx, spec, snap, Options{Launcher: l})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	if m2.State() != InstanceRunning || l.last().State() != InstanceRunning {
		t.Errorf("restored: machine %q, fake %q; want Running", m2.State(), l.last().State())
	}
	checkStreams(t, m2.Transport())
	sdCtx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := m2.Shutdown(sdCtx); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"GET /", "PUT /machine-config", "PUT /boot-source", "PUT /drives/root", "PUT /drives/scratch", "PUT /vsock", "PUT /actions",
		"PATCH /vm", "PUT /snapshot/create",
		"GET /", "PUT /snapshot/load", "PUT /actions",
	}
	if got := routes(l.all()); !slices.Equal(got, want) {
		t.Errorf("requests:\n got %v\nwant %v", got, want)
	}
	noViolations(t, l.all())
}

// TestMachineJailed: under the jailer the API gets paths inside the jail,
// and the host finds the API socket, the vsock socket and the snapshot in
// the jail's root.
func TestMachineJailed(t *testing.T) {
	base := shortDir(t)
	spec := LaunchSpec{Binary: "/usr/bin/firecracker", APISock: "/run/api.sock", ID: "vm-j",
		Jailer: &Jailer{Binary: "/usr/bin/jailer", UID: 123, GID: 100, ChrootBaseDir: base}}
	root := filepath.Join(base, "firecracker", "vm-j", "root")
	if spec.ChrootDir() != root {
		t.Fatalf("ChrootDir = %s, want %s", spec.ChrootDir(), root)
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	files(t, root, "vmlinux", "initrd", "root.img", "scratch.img")
	l := &inProcess{setup: guestPorts}
	ctx := context.Background()
	m, err := Launch(ctx, spec, Options{Launcher: l})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	if err := m.Boot(ctx, vmConfig("/")); err != nil {
		t.Fatal(err)
	}
	if tr := m.Transport().(VsockTransport); tr.UDSPath != filepath.Join(root, "v.sock") {
		t.Errorf("the host dials %s", tr.UDSPath)
	}
	checkStreams(t, m.Transport())
	snap, err := m.Park(ctx, Snapshot{StatePath: "/vm.snap", MemPath: "/vm.mem"})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"vm.snap", "vm.mem"} {
		if _, err := os.Stat(filepath.Join(root, p)); err != nil {
			t.Errorf("the snapshot is not in the jail: %v", err)
		}
	}
	m2, err := Restore(ctx, spec, snap, Options{Launcher: l})
	if err != nil {
		t.Fatal(err)
	}
	defer m2.Close()
	checkStreams(t, m2.Transport())
	m2.Close()
	for _, p := range []string{"run/api.sock", "v.sock"} {
		if _, err := os.Lstat(filepath.Join(root, p)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s left in the jail (%v)", p, err)
		}
	}
	noViolations(t, l.all())
}

// TestMachineBootFailures: a refusal anywhere in the boot comes back as an
// *APIError with Firecracker's fault_message, naming what was refused.
func TestMachineBootFailures(t *testing.T) {
	for _, tc := range []struct {
		name   string
		refuse string
		fault  string
		doing  string
	}{
		{"refused machine config", "PUT /machine-config", "Machine config error: Invalid vCPU count.", "configuring the machine config"},
		{"refused drive", "PUT /drives/{id}", "Drive config error: Unable to create the block device", "configuring the drive root"},
		{"refused vsock", "PUT /vsock", "Vsock config error: Cannot create backend for vsock device: Address in use", "configuring the vsock"},
		{"fault on start", "PUT /actions", "Start microvm error: Cannot load kernel due to invalid memory configuration or invalid kernel image: Invalid Elf magic number", "starting the VM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := shortDir(t)
			files(t, dir, "vmlinux", "initrd", "root.img", "scratch.img")
			l := &inProcess{setup: func(s *fctest.Server) { s.Refuse(tc.refuse, tc.fault) }}
			m, err := Launch(context.Background(), LaunchSpec{Binary: "firecracker", APISock: filepath.Join(dir, "api.sock")}, Options{Launcher: l})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			err = m.Boot(context.Background(), vmConfig(dir))
			var apiErr *APIError
			if !errors.As(err, &apiErr) || apiErr.FaultMessage != tc.fault {
				t.Fatalf("Boot: %v, want an *APIError with %q", err, tc.fault)
			}
			if !strings.Contains(err.Error(), tc.doing) {
				t.Errorf("the error %q does not say it was %s", err, tc.doing)
			}
			if m.State() != InstanceNotStarted {
				t.Errorf("state %q after a failed boot", m.State())
			}
			noViolations(t, l.all())
		})
	}
}

// TestMachineOrder: calls out of order are refused by the Machine itself,
// before a request is sent.
func TestMachineOrder(t *testing.T) {
	ctx := context.Background()
	snap := Snapshot{StatePath: "/nonexistent/s", MemPath: "/nonexistent/m"}
	for _, tc := range []struct {
		name string
		boot bool
		call func(*Machine) error
	}{
		{"pause before boot", false, func(m *Machine) error { return m.Pause(ctx) }},
		{"resume while running", true, func(m *Machine) error { return m.Resume(ctx) }},
		{"park before boot", false, func(m *Machine) error { _, err := m.Park(ctx, snap); return err }},
		{"boot twice", true, func(m *Machine) error { return m.Boot(ctx, Config{}) }},
		{"shutdown before boot", false, func(m *Machine) error { return m.Shutdown(ctx) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := shortDir(t)
			files(t, dir, "vmlinux", "initrd", "root.img", "scratch.img")
			l := &inProcess{}
			m, err := Launch(ctx, LaunchSpec{Binary: "firecracker", APISock: filepath.Join(dir, "api.sock")}, Options{Launcher: l})
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if tc.boot {
				if err := m.Boot(ctx, vmConfig(dir)); err != nil {
					t.Fatal(err)
				}
			}
			n := len(l.all())
			if err := tc.call(m); !errors.Is(err, ErrState) {
				t.Fatalf("got %v, want ErrState", err)
			}
			if sent := l.all()[n:]; len(sent) != 0 {
				t.Errorf("requests sent anyway: %v", routes(sent))
			}
		})
	}
}

// recording wraps ExecLauncher and keeps the processes it started.
type recording struct {
	procs []Process
}

func (r *recording) Launch(ctx context.Context, spec LaunchSpec) (Process, error) {
	p, err := ExecLauncher{}.Launch(ctx, spec)
	if err == nil {
		r.procs = append(r.procs, p)
	}
	return p, err
}

// TestLaunchProcess: the real launcher with this test binary standing in
// for firecracker (fctest.Main): a process that serves the API boots and
// shuts down; one whose socket never appears is given up on at the
// deadline and killed; one that dies is reported with its output.
func TestLaunchProcess(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		mode    string
		wantErr error
		output  string
	}{
		{name: "serves"},
		{name: "socket never appears", mode: "silent", wantErr: ErrNoSocket},
		{name: "exits at once", mode: "exit", wantErr: ErrExited, output: "no KVM"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := shortDir(t)
			files(t, dir, "vmlinux", "initrd", "root.img", "scratch.img")
			logf := filepath.Join(dir, "calls.jsonl")
			t.Setenv(fakeEnv, "1")
			t.Setenv(fctest.ModeEnv, tc.mode)
			t.Setenv(fctest.LogEnv, logf)
			rec := &recording{}
			start := time.Now()
			m, err := Launch(context.Background(), LaunchSpec{Binary: self, APISock: filepath.Join(dir, "api.sock"), ID: "vm-7"},
				Options{Launcher: rec, StartTimeout: 2 * time.Second})
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("Launch: %v, want %v", err, tc.wantErr)
				}
				if !strings.Contains(err.Error(), tc.output) {
					t.Errorf("the error %q lacks the process's output %q", err, tc.output)
				}
				if d := time.Since(start); d > 10*time.Second {
					t.Errorf("gave up after %v", d)
				}
				// No orphan: the process has ended by the time Launch returns.
				select {
				case <-rec.procs[0].Done():
				default:
					t.Error("the process still runs after a failed launch")
				}
				if _, err := os.Lstat(filepath.Join(dir, "api.sock")); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("API socket left behind (%v)", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			if info := m.Info(); info.ID != "vm-7" || info.State != InstanceNotStarted {
				t.Errorf("GET / said %+v", info)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			if err := m.Boot(ctx, vmConfig(dir)); err != nil {
				t.Fatal(err)
			}
			if err := m.Shutdown(ctx); err != nil {
				t.Fatal(err)
			}
			if err := rec.procs[0].Err(); err != nil {
				t.Errorf("the process ended with %v after the shutdown", err)
			}
			// The process's own record of what it was asked.
			raw, err := os.ReadFile(logf)
			if err != nil {
				t.Fatal(err)
			}
			var calls []fctest.Call
			for line := range strings.Lines(string(raw)) {
				var c fctest.Call
				if err := json.Unmarshal([]byte(line), &c); err != nil {
					t.Fatal(err)
				}
				calls = append(calls, c)
			}
			if len(calls) != 8 {
				t.Errorf("the process answered %v, want 8 requests", routes(calls))
			}
			noViolations(t, calls)
		})
	}
}

func TestLaunchSpecArgv(t *testing.T) {
	jail := &Jailer{Binary: "/usr/bin/jailer", UID: 123, GID: 100}
	for _, tc := range []struct {
		name string
		spec LaunchSpec
		argv string
		host string // HostAPISock
		bad  bool
	}{
		{name: "plain", spec: LaunchSpec{Binary: "/usr/bin/firecracker", APISock: "/run/dx/api.sock"},
			argv: "/usr/bin/firecracker --api-sock /run/dx/api.sock", host: "/run/dx/api.sock"},
		{name: "with an id", spec: LaunchSpec{Binary: "firecracker", APISock: "a.sock", ID: "vm-1"},
			argv: "firecracker --api-sock a.sock --id vm-1", host: "a.sock"},
		{name: "jailer", spec: LaunchSpec{Binary: "/usr/bin/firecracker", APISock: "/run/firecracker.socket", ID: "vm-1", Jailer: jail},
			argv: "/usr/bin/jailer --id vm-1 --exec-file /usr/bin/firecracker --uid 123 --gid 100 -- --api-sock /run/firecracker.socket",
			host: "/srv/jailer/firecracker/vm-1/root/run/firecracker.socket"},
		{name: "jailer with options", spec: LaunchSpec{Binary: "/opt/firecracker-v1", APISock: "/api.sock", ID: "vm-2",
			Jailer: &Jailer{Binary: "jailer", ChrootBaseDir: "/var/jail", NetNS: "/var/run/netns/dx", CgroupVersion: 2}},
			argv: "jailer --id vm-2 --exec-file /opt/firecracker-v1 --uid 0 --gid 0 --chroot-base-dir /var/jail --netns /var/run/netns/dx --cgroup-version 2 -- --api-sock /api.sock",
			host: "/var/jail/firecracker-v1/vm-2/root/api.sock"},
		{name: "jailer without an id", spec: LaunchSpec{Binary: "/usr/bin/firecracker", APISock: "/a", Jailer: jail}, bad: true},
		{name: "jailer with an exec file not named firecracker", spec: LaunchSpec{Binary: "/usr/bin/vmm", APISock: "/a", ID: "x", Jailer: jail}, bad: true},
		{name: "jailer with a relative socket", spec: LaunchSpec{Binary: "/usr/bin/firecracker", APISock: "a", ID: "x", Jailer: jail}, bad: true},
		{name: "an id with a slash", spec: LaunchSpec{Binary: "firecracker", APISock: "a", ID: "../x"}, bad: true},
		{name: "no socket", spec: LaunchSpec{Binary: "firecracker"}, bad: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			argv, err := tc.spec.Argv()
			if tc.bad {
				if !errors.Is(err, errBadSpec) {
					t.Fatalf("Argv: %q, %v; want errBadSpec", argv, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(argv, " "); got != tc.argv {
				t.Errorf("argv\n got %s\nwant %s", got, tc.argv)
			}
			if got := tc.spec.HostAPISock(); got != tc.host {
				t.Errorf("HostAPISock = %s, want %s", got, tc.host)
			}
		})
	}
}
