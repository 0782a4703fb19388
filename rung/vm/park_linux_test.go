package vm_test

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/rung/vm"
	"github.com/dryexec/dryexec/session"
)

// TestSessionPark: a parked vm session's VM is saved to disk and QEMU ends;
// resumed, the session is where it was: the workspace and its baseline (the
// diff), the shell's cwd and exported variables, in the same guest
// supervisor (whose start time in the VM is unchanged). The parked
// session's handle is closed, and a parked state resumes once.
func TestSessionPark(t *testing.T) {
	requireVMSession(t)
	s := openVM(t, session.Options{})
	ctx := t.Context()
	r, err := s.Shell(ctx, "echo base > kept.txt", time.Minute)
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("shell: %v %+v", err, r)
	}
	if _, err := s.Diff(ctx, true); err != nil {
		t.Fatal(err)
	}
	r, err = s.Shell(ctx, "mkdir sub && cd sub && echo data > f.txt && export PARKVAR=hello && cut -d' ' -f22 /proc/1/stat", time.Minute)
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("shell: %v %+v", err, r)
	}
	guestStart := strings.TrimSpace(r.Stdout)
	// A park that fails (here: no dir to save to) leaves the session as it
	// was: the guest took its view back.
	if _, err := s.Park(ctx, filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Fatal("a park into a missing dir succeeded")
	}
	r, err = s.Shell(ctx, "pwd; echo $PARKVAR; cat f.txt; ls /usr/bin/env", time.Minute)
	if err != nil || r.Stdout != "/workspace/sub\nhello\ndata\n/usr/bin/env\n" {
		t.Fatalf("after a failed park: %v %+v", err, r)
	}
	qemu := s.GuestPID()
	dir := t.TempDir()
	p, err := s.Park(ctx, dir)
	if err != nil {
		t.Fatalf("park: %v", err)
	}
	st, err := os.Stat(filepath.Join(dir, vm.ParkFile))
	if err != nil || st.Size() == 0 {
		t.Fatalf("the parked state: %v %v", st, err)
	}
	// QEMU is gone (reaped by the sandbox's Close): a parked session holds
	// no VM.
	if _, err := os.Stat("/proc/" + itoa(qemu)); err == nil {
		if b, _ := os.ReadFile("/proc/" + itoa(qemu) + "/cmdline"); strings.Contains(string(b), "qemu") {
			t.Errorf("QEMU (pid %d) still runs after park", qemu)
		}
	}
	if _, err := s.Shell(ctx, "true", time.Minute); !errors.Is(err, dryexec.ErrSessionLost) {
		t.Errorf("a call on the parked session's handle: %v, want ErrSessionLost", err)
	}
	s2, err := session.Resume(ctx, p)
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	t.Cleanup(func() { s2.Close() })
	r, err = s2.Shell(ctx, "pwd; echo $PARKVAR; cat f.txt; cut -d' ' -f22 /proc/1/stat", time.Minute)
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("shell after resume: %v %+v", err, r)
	}
	want := "/workspace/sub\nhello\ndata\n" + guestStart + "\n"
	if r.Stdout != want {
		t.Errorf("after resume: %q, want %q (cwd, variable, file, the same guest)", r.Stdout, want)
	}
	d, err := s2.Diff(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Paths(); !slices.Equal(got, []string{"sub/f.txt"}) {
		t.Errorf("diff after resume: %v, want [sub/f.txt] (the baseline kept)", got)
	}
	if _, err := session.Resume(ctx, p); err == nil {
		t.Error("a parked state resumed twice")
	}
}

func itoa(n int) string { return strconv.Itoa(n) }
