package linuxns_test

import (
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/rootless"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/rung/linuxns"
)

// TestContainmentRootless re-runs the masked-secrets tests, dryexec's own
// state hidden, and the rlimit
// fallback as an unprivileged user, whose cgroups this host's v1 tree refuses.
func TestContainmentRootless(t *testing.T) {
	rootless.Rerun(t, "^(TestMaskedSecrets|TestRlimitFallback|TestOwnStateHidden)$", 5*time.Minute)
}

// sealedEnv names the private directory TestUnlistableDirWithMount made for
// its rootless re-run.
const sealedEnv = "DRYEXEC_TEST_SEALED"

// TestUnlistableDirWithMount: a root-owned directory the caller may not
// list, with a mount inside (Docker's /var/lib/docker, another test's
// scratch mount under /tmp), made every rootless trial fail: the overlay of
// its parent had to be split, and the split lists it. Now the sandbox shows
// it as the host does to that user (nothing can be listed, read or written
// there), and the trial runs.
func TestUnlistableDirWithMount(t *testing.T) {
	if os.Getuid() != 0 {
		dir := os.Getenv(sealedEnv)
		if dir == "" {
			t.Skip("set up by the root run")
		}
		work := t.TempDir()
		d, err := (&linuxns.Rung{}).Trial(t.Context(), dryexec.TrialSpec{Action: dryexec.Action{Cwd: work,
			Env: map[string]string{"PATH": "/usr/bin:/bin"}, Argv: []string{"/bin/sh", "-c",
				"ls " + dir + " || echo unlistable; ls " + dir + "/m || echo unreachable; echo x > " + dir + "/new || echo unwritable; echo ok > f"}}})
		if err != nil {
			t.Fatalf("a rootless trial beside an unlistable directory with a mount in it: %v", err)
		}
		for _, want := range []string{"unlistable", "unreachable", "unwritable"} {
			if !strings.Contains(d.Process.Stdout, want) {
				t.Errorf("stdout %q lacks %q (stderr %q)", d.Process.Stdout, want, d.Process.Stderr)
			}
		}
		if len(d.Files) != 1 || d.Files[0].Path != work+"/f" {
			t.Errorf("files %+v, want only %s/f", d.Files, work)
		}
		return
	}
	dir, err := os.MkdirTemp("", "dryexec-private-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(dir+"/m", 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("dryexec-test", dir+"/m", "tmpfs", 0, "size=1m"); err != nil {
		t.Fatal(err)
	}
	defer unix.Unmount(dir+"/m", unix.MNT_DETACH)
	rootless.Rerun(t, "^TestUnlistableDirWithMount$", 2*time.Minute, sealedEnv+"="+dir)
}

// TestSalvageRootless re-runs the killed-guest test as an unprivileged user:
// the host owns the guest's user namespace, takes its handle on the scratch
// tmpfs through /proc the same way, and walks it from a user namespace of
// its own (the command made a file unreadable, mode 000).
func TestSalvageRootless(t *testing.T) {
	// The re-run's test kills the guest through a test hook: without the
	// hooks it would skip there and the re-run would have run nothing.
	testreq.NeedTestHooks(t)
	rootless.Rerun(t, "^(TestGuestKilledMidTrial)$", 2*time.Minute)
}
