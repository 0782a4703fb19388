package vm

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/dryexec/dryexec/guest"
	"github.com/dryexec/dryexec/internal/testhooks"
	"github.com/dryexec/dryexec/netsim/netrole"
	"github.com/dryexec/dryexec/rung/vm/firecracker/fctest"
)

// TestMain lets this test binary serve as the view guest (the rung
// re-executes /proc/self/exe as `dryexec guest gvisor-view`), and as a fake
// firecracker (vmm_linux_test.go).
func TestMain(m *testing.M) {
	switch os.Getenv(fakeFirecrackerEnv) {
	case "1":
		os.Exit(fctest.Main(os.Args[1:]))
	case fakeQEMUFirecracker:
		os.Exit(fctest.MainBacked(os.Args[1:], qemuBackedFirecracker))
	}
	guest.MaybeMain(os.Args)
	netrole.MaybeMain(os.Args)
	code := m.Run()
	if guestPath != "" {
		os.RemoveAll(filepath.Dir(guestPath))
	}
	os.Exit(code)
}

// staticGuest builds cmd/dryexec-guest with CGO_ENABLED=0 once per test
// binary: the initramfs has no libc, and a test binary may be dynamic.
func staticGuest(t testing.TB) string {
	t.Helper()
	guestOnce.Do(func() {
		dir, err := os.MkdirTemp("", "dryexec-vm-guest-")
		if err != nil {
			guestErr = err
			return
		}
		guestPath = filepath.Join(dir, "dryexec-guest")
		args := []string{"build", "-o", guestPath}
		if testhooks.Enabled {
			// The guest has the hooks the tests do (testhooks.VMPanicEnv).
			args = append(args, "-tags", testhooks.Tag)
		}
		cmd := exec.Command("go", append(args, "github.com/dryexec/dryexec/cmd/dryexec-guest")...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			guestErr = &buildError{out: string(out), err: err}
		}
	})
	if guestErr != nil {
		t.Fatal(guestErr)
	}
	return guestPath
}

func TestBootProbe(t *testing.T) {
	ctx := context.Background()
	cache := cmpOr(os.Getenv("VMTEST_CACHE"), t.TempDir())
	k, err := FindKernel(ctx, "", cache)
	if err != nil {
		t.Skip(err)
	}
	q, err := FindQEMU("")
	if err != nil {
		t.Skip(err)
	}
	initrd, err := Initramfs(k, staticGuest(t), cache)
	if err != nil {
		t.Fatal(err)
	}
	res, err := bootProbe(ctx, vmConfig{qemu: q, accel: AccelTCG, kernel: k.Vmlinux, initramfs: initrd, transport: virtioSerial{}}, 60*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("boot to hello: %v (%s)", res.Hello, res.Accel)
}
