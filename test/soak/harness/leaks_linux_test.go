package harness

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dryexec/dryexec/internal/testreq"
	"golang.org/x/sys/unix"
)

// The leak counts see what they are meant to: a mount under the test's own
// dir (and not one under another test's), a marked process, a temp entry.
func TestLeaksSeeWhatIsLeft(t *testing.T) {
	testreq.NeedRoot(t)
	root, other := t.TempDir(), t.TempDir()
	e := NewEnv(t, root)
	b := TakeBaseline()
	if l := e.Leaks(b, root, nil); !l.Empty() {
		t.Fatalf("a fresh env leaks: %s", l)
	}
	mine, theirs := filepath.Join(root, "m"), filepath.Join(other, "m")
	for _, d := range []string{mine, theirs} {
		os.Mkdir(d, 0o755)
		if err := unix.Mount("tmpfs", d, "tmpfs", 0, "size=1m"); err != nil {
			testreq.Needf(t, testreq.Kernel, "tmpfs mount", err)
		}
		t.Cleanup(func() { unix.Unmount(d, unix.MNT_DETACH) })
	}
	os.WriteFile(filepath.Join(e.TmpDir, "left"), nil, 0o600)
	cmd := exec.Command("sleep", "60")
	cmd.Env = e.Vars()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })

	l := e.Leaks(b, root, nil)
	if len(l.Mounts) != 1 || !strings.HasPrefix(l.Mounts[0], mine+" tmpfs") {
		t.Errorf("mounts: %v, want only %s", l.Mounts, mine)
	}
	if len(l.Procs) != 1 || !strings.Contains(l.Procs[0], "sleep 60") {
		t.Errorf("processes: %v, want the marked sleep", l.Procs)
	}
	if len(l.TempEntries) != 1 {
		t.Errorf("temp entries: %v", l.TempEntries)
	}
	// A live daemon's descendants are its own.
	if l := e.Leaks(b, root, nil, os.Getpid()); len(l.Procs) != 0 {
		t.Errorf("a live process's children counted as leaks: %v", l.Procs)
	}
}
