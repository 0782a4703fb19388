package vm_test

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/procfs"
	"github.com/dryexec/dryexec/internal/rungcompare"
	"github.com/dryexec/dryexec/rung/vm"
	"github.com/dryexec/dryexec/rung/vm/firecracker"
	"github.com/dryexec/dryexec/session"
	"github.com/dryexec/dryexec/wire"
)

// TestImageSessionOnFirecracker: a session on an OCI image with the rung's
// VMM Firecracker — fctest's fake backed by QEMU (vm.QEMUFirecracker), a
// real guest in a real VM behind every checked call — runs on Firecracker:
// its shell and its workspace's diff. It parks by Firecracker's snapshot:
// PATCH /vm Paused, then PUT /snapshot/create (Full) with the state and
// memory files in the park dir, then the VMM ended (neither the fake nor
// its QEMU left: a parked session holds no RAM); it resumes in a fresh
// Firecracker whose only request after GET / is PUT /snapshot/load
// (resume_vm, the vsock bound afresh by vsock_override), with the
// workspace, its baseline, the image overlay's upper dir (in the VM's
// RAM), the shell's cwd and the same guest supervisor as they were. No
// call refused. A park through a link planted in the park dir fails,
// leaving the host file and the session as they were. A rung that does
// not use Firecracker refuses to resume the park, typed, before anything
// starts; a fork with memory is refused, typed, and the session goes on.
func TestImageSessionOnFirecracker(t *testing.T) {
	requireVMSession(t)
	t.Setenv("DRYEXEC_HOME", t.TempDir())
	r := &vm.Rung{}
	calls := vm.QEMUFirecracker(t, r)
	// session.Open makes its rung from the environment.
	t.Setenv(vm.VMMEnv, vm.VMMFirecracker)
	t.Setenv(firecracker.BinaryEnv, r.Firecracker)
	root := rungcompare.PullImage(t, rungcompare.AwkwardImage(t))
	ctx := t.Context()
	s, err := session.Open(ctx, session.Options{Rung: vm.Name, Image: root})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if w := strings.Join(s.Warnings(), "\n"); !strings.Contains(w, "vmm firecracker: ") {
		t.Errorf("the session does not say it runs on Firecracker: %q", s.Warnings())
	}
	sh := func(s *session.Session, cmd string) string {
		t.Helper()
		r, err := s.Shell(ctx, cmd, 5*time.Minute)
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("%q: %v %+v", cmd, err, r)
		}
		return r.Stdout
	}
	sh(s, "echo base > kept.txt")
	if _, err := s.Diff(ctx, true); err != nil {
		t.Fatal(err)
	}
	// The shell's cwd is kept across execs, and so across the park; its
	// exported variables are not on this image, on QEMU alike (it has no
	// `env` for the shell's state to be read with), so none is checked.
	guestStart := strings.TrimSpace(sh(s, "mkdir sub && cd sub && echo data > f.txt && echo up > /w/up.txt && cut -d' ' -f22 /proc/1/stat"))
	booted := vm.Routes(calls(t))
	wantBoot := []string{"GET /", "PUT /machine-config", "PUT /boot-source", "PUT /drives/" + wire.VMImageSerial, "PUT /vsock", "PUT /actions"}
	if !slices.Equal(booted, wantBoot) {
		t.Fatalf("the session's boot: %q, want %q", booted, wantBoot)
	}
	if args, _ := calls(t)[2].Body["boot_args"].(string); !strings.HasSuffix(args, " "+wire.RoleSession) {
		t.Errorf("boot args %q: the init is not asked for a session guest", args)
	}
	// The VMM: the view guest become the fake firecracker, and its QEMU.
	vmm := s.GuestPID()
	qemu := procfs.Children(vmm, func(comm string, _ []string) bool { return strings.HasPrefix(comm, "qemu-system") })
	if len(qemu) != 1 {
		t.Fatalf("the fake firecracker's children: %v, want its QEMU", qemu)
	}
	// A park dir whose memory file's name is taken by a link to a host
	// file: the park fails before the VM is touched, the host file is
	// unchanged, and the session goes on.
	host := filepath.Join(t.TempDir(), "host-file")
	if err := os.WriteFile(host, []byte("host"), 0o600); err != nil {
		t.Fatal(err)
	}
	planted := t.TempDir()
	if err := os.Symlink(host, filepath.Join(planted, vm.FCMemFile)); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Park(ctx, planted); err == nil {
		t.Fatal("a park through a planted link succeeded")
	}
	if b, _ := os.ReadFile(host); string(b) != "host" {
		t.Errorf("the host file behind the planted link: %q", b)
	}
	if got := sh(s, "pwd; cat f.txt"); got != "/workspace/sub\ndata\n" {
		t.Errorf("after the refused park: %q", got)
	}
	dir := t.TempDir()
	p, err := s.Park(ctx, dir)
	if err != nil {
		t.Fatalf("park: %v", err)
	}
	for _, pid := range append(qemu, vmm) {
		if alive(pid) {
			t.Errorf("pid %d (the VMM or its QEMU) still runs after the park", pid)
		}
	}
	for _, f := range []string{vm.FCStateFile, vm.FCMemFile, vm.ParkImageFile} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("the park's %s: %v", f, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, vm.ParkFile)); err == nil {
		t.Errorf("a park on Firecracker wrote QEMU's %s", vm.ParkFile)
	}
	parked := calls(t)[len(booted):]
	// Nothing reached the VMM for the refused park.
	if got, want := vm.Routes(parked), []string{"PATCH /vm", "PUT /snapshot/create"}; !slices.Equal(got, want) {
		t.Errorf("the park's calls %q, want %q", got, want)
	} else {
		if parked[0].Body["state"] != "Paused" {
			t.Errorf("the park's PATCH /vm: %v", parked[0].Body)
		}
		want := map[string]any{"snapshot_type": "Full", "snapshot_path": filepath.Join(dir, vm.FCStateFile), "mem_file_path": filepath.Join(dir, vm.FCMemFile)}
		if !reflect.DeepEqual(parked[1].Body, want) {
			t.Errorf("the park's snapshot/create: %v, want %v", parked[1].Body, want)
		}
	}
	// A rung on QEMU cannot load Firecracker's snapshot: refused before
	// any VMM starts, the saved state left as it was.
	before := len(calls(t))
	if sb, err := (&vm.Rung{VMM: vm.VMMQEMU}).Resume(ctx, dryexec.SandboxSpec{Image: root}, dir); !errors.Is(err, vm.ErrParkedOnFirecracker) {
		if sb != nil {
			sb.Close()
		}
		t.Errorf("resuming a Firecracker park on QEMU: %v, want ErrParkedOnFirecracker", err)
	}
	s2, err := session.Resume(ctx, p)
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	defer s2.Close()
	restored := calls(t)[before:]
	if got, want := vm.Routes(restored), []string{"GET /", "PUT /snapshot/load"}; !slices.Equal(got, want) {
		t.Errorf("the resume's calls %q, want %q", got, want)
	} else if b := restored[1].Body; b["resume_vm"] != true || b["vsock_override"] == nil || b["mem_backend"] == nil {
		t.Errorf("the resume's snapshot/load: %v, want resume_vm, a memory backend and vsock_override", b)
	}
	if got, want := sh(s2, "pwd; cat f.txt /w/up.txt; cut -d' ' -f22 /proc/1/stat"), "/workspace/sub\ndata\nup\n"+guestStart+"\n"; got != want {
		t.Errorf("after resume: %q, want %q (cwd, file, the image's overlay, the same guest)", got, want)
	}
	d, err := s2.Diff(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Paths(); !slices.Equal(got, []string{"sub/f.txt"}) {
		t.Errorf("diff after resume: %v, want [sub/f.txt] (the baseline kept)", got)
	}
	if _, err := s2.Fork(ctx, 1); !errors.Is(err, vm.ErrFirecrackerFork) {
		t.Errorf("a fork with memory on Firecracker: %v, want ErrFirecrackerFork", err)
	}
	if got := sh(s2, "cat f.txt"); got != "data\n" {
		t.Errorf("after the refused fork: %q", got)
	}
	for _, c := range calls(t) {
		if c.Violation || c.Status >= 300 {
			t.Errorf("refused: %+v", c)
		}
	}
	s2.Close()
	vm.NoFCLeftovers(t)
}

// alive: pid runs (it is not gone, nor a zombie).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	return len(f) > 0 && f[0] != "Z"
}

// TestImageSessionParkedOnQEMU: a session on an image parked while the
// rung used QEMU resumes on QEMU once Firecracker is chosen (only QEMU
// loads its saved state), with no request to Firecracker, and works.
func TestImageSessionParkedOnQEMU(t *testing.T) {
	requireVMSession(t)
	t.Setenv("DRYEXEC_HOME", t.TempDir())
	r := &vm.Rung{}
	calls := vm.QEMUFirecracker(t, r)
	root := rungcompare.PullImage(t, rungcompare.AwkwardImage(t))
	ctx := t.Context()
	t.Setenv(vm.VMMEnv, vm.VMMQEMU)
	s, err := session.Open(ctx, session.Options{Rung: vm.Name, Image: root})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if r, err := s.Shell(ctx, "echo q > q.txt", 5*time.Minute); err != nil || r.ExitCode != 0 {
		t.Fatalf("shell: %v %+v", err, r)
	}
	dir := t.TempDir()
	p, err := s.Park(ctx, dir)
	if err != nil {
		t.Fatalf("park on QEMU: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, vm.ParkFile)); err != nil {
		t.Fatalf("QEMU's park: %v", err)
	}
	t.Setenv(vm.VMMEnv, vm.VMMFirecracker)
	t.Setenv(firecracker.BinaryEnv, r.Firecracker)
	s2, err := session.Resume(ctx, p)
	if err != nil {
		t.Fatalf("resuming a QEMU park with Firecracker chosen: %v", err)
	}
	defer s2.Close()
	if r, err := s2.Shell(ctx, "cat q.txt", 5*time.Minute); err != nil || r.Stdout != "q\n" {
		t.Errorf("after resume: %v %+v", err, r)
	}
	if w := strings.Join(s2.Warnings(), "\n"); strings.Contains(w, "vmm firecracker") {
		t.Errorf("the resumed session says Firecracker runs it: %q", s2.Warnings())
	}
	if c := calls(t); len(c) != 0 {
		t.Errorf("firecracker was asked %q for a session parked on QEMU", vm.Routes(c))
	}
	s2.Close()
	vm.NoFCLeftovers(t)
}
