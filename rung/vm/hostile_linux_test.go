package vm_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/testhooks"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/rung/vm"
)

// TestVMRootAgainstTheView has root of the VM — the guest supervisor, not
// the command, which runs in a user namespace of its own — do to the 9p
// view what a VM taken over could (testhooks.VMRootEnv): device nodes, a
// setuid root file with security.capability, trusted.* xattrs and the
// overlay's own opaque marker on a host dir, a symlink to /etc and a write
// through it, a hard link, a name with a newline, a 255-byte name, "..".
// The host's files stay as they were, and the delta shows what the VM
// made where it saw it: what the 9p mount refused (device nodes, ENXIO;
// xattrs, EOPNOTSUPP, this QEMU and kernel) is absent, a device node it
// made would be listed as kind other (which commit refuses), the setuid
// root file is listed with its owner and the mode the upper dir holds
// (policy reviews a setuid bit), no host file the opaque marker would hide
// is deleted, and the writes through the link and above the root are in
// the view's /etc and /, never the host's.
func TestVMRootAgainstTheView(t *testing.T) {
	requireVMSession(t)
	testreq.NeedTestHooks(t)
	dir := t.TempDir()
	for p, c := range map[string]string{"hostfile": "host\n", "sub/keep": "keep\n"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := &vm.Rung{BootTimeout: 5 * time.Minute}
	// The hook runs before the command starts: the command only checks
	// it ran.
	d, err := r.Trial(context.Background(), dryexec.TrialSpec{Action: dryexec.Action{
		Argv: []string{"env", testhooks.VMRootEnv + "=1", "sh", "-c", "test -e " + testhooks.VMRootDone + " && cat vm-root-errors"}, Cwd: dir,
		Env: map[string]string{"PATH": "/usr/bin:/bin"}}})
	if err != nil {
		t.Fatal(err)
	}
	if d.Process.ExitCode != 0 {
		t.Fatalf("exit %d (the hook did not run?): %s", d.Process.ExitCode, d.Process.Stderr)
	}
	byPath := map[string]dryexec.FileChange{}
	for _, fc := range d.Files {
		byPath[fc.Path] = fc
	}
	t.Logf("what the VM's root was refused:\n%s", d.Process.Stdout)
	// What the VM's root was refused (its hook's own list) is absent;
	// what it made is listed as it is.
	for _, name := range []string{"mem", "disk"} {
		fc, listed := byPath[filepath.Join(dir, name)]
		switch refused := strings.Contains(d.Process.Stdout, "mknod "+name+":"); {
		case refused && listed:
			t.Errorf("%s: refused in the VM, yet in the delta: %+v", name, fc)
		case !refused && (fc.Kind != dryexec.KindOther || fc.Op != dryexec.OpCreate):
			t.Errorf("%s: %+v, want a created node of kind other (which commit refuses)", name, fc)
		}
	}
	if fc := byPath[filepath.Join(dir, "suid")]; fc.Op != dryexec.OpCreate || fc.UID != 0 {
		t.Errorf("suid: %+v, want a file created by root", fc)
	}
	if fc := byPath[filepath.Join(dir, "esc")]; fc.Kind != dryexec.KindSymlink || fc.LinkTarget != "/etc" {
		t.Errorf("esc: %+v, want a symlink to /etc", fc)
	}
	// The write through the link and the one above the view's root stay
	// in the view: listed where the VM saw them.
	for _, p := range []string{"/etc/dryexec-vm-root", "/dryexec-vm-root-top"} {
		if fc := byPath[p]; fc.Op != dryexec.OpCreate {
			t.Errorf("%s: %+v, want it created in the view", p, fc)
		}
	}
	for _, name := range []string{"a\nb", strings.Repeat("n", 255)} {
		if _, ok := byPath[filepath.Join(dir, name)]; !ok {
			t.Errorf("the delta lacks %q", name)
		}
	}
	if fc, ok := byPath[filepath.Join(dir, "sub/keep")]; ok {
		t.Errorf("sub/keep in the delta (%s): the opaque marker hid a host file", fc.Op)
	}
	// The host: unchanged.
	for p, c := range map[string]string{"hostfile": "host\n", "sub/keep": "keep\n"} {
		if b, err := os.ReadFile(filepath.Join(dir, p)); err != nil || string(b) != c {
			t.Errorf("host %s: %q %v", p, b, err)
		}
	}
	for _, p := range []string{"/etc/dryexec-vm-root", "/dryexec-vm-root-top", filepath.Join(dir, "mem"), filepath.Join(dir, "suid")} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s exists on the host", p)
		}
	}
	t.Logf("delta: incomplete %v %q; files %d", d.Incomplete, d.IncompleteReason, len(d.Files))
	for _, fc := range d.Files {
		t.Logf("  %s %s %s mode %s uid %d", fc.Op, fc.Kind, fc.Path, fc.Mode, fc.UID)
	}
}

// TestQEMUConfined: QEMU, which serves the VM's 9p and virtio requests as
// root in the view guest's mount namespace, runs under its own seccomp
// filter (-sandbox): a VM that broke into it meets the filter before the
// host. The trial then ends as when QEMU is killed.
func TestQEMUConfined(t *testing.T) {
	requireVMSession(t)
	spec := dryexec.TrialSpec{Limits: faultLimits, Action: dryexec.Action{TimeoutMS: 300_000}}
	var status string
	faultTrial(t, &vm.Rung{}, spec, []string{"sh", "-c", "echo started; sleep 600"}, func(qemu int) {
		b, err := os.ReadFile("/proc/" + strconv.Itoa(qemu) + "/status")
		if err != nil {
			t.Error(err)
		}
		status = string(b)
		syscall.Kill(qemu, syscall.SIGKILL)
	})
	if !strings.Contains(status, "\nSeccomp:\t2\n") {
		t.Errorf("QEMU runs without a seccomp filter:\n%s", status)
	}
}
