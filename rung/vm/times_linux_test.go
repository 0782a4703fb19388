package vm

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
)

// TestGivenTimesAreExact: the times a vm trial's command gives an entry
// keep their nanoseconds (the VM's 9p client alone keeps whole seconds; the
// host sets them through the view), on a file, a directory and a link's own
// (not followed); a caller that does not own the file still gets EPERM; a
// file reached through a link to a host directory changes in the view only.
func TestGivenTimesAreExact(t *testing.T) {
	r := testRung(t)
	r.BootTimeout = 5 * time.Minute // a boot under TCG on a loaded host
	dir := t.TempDir()
	host := filepath.Join(t.TempDir(), "hostdir")
	if err := os.Mkdir(host, 0o755); err != nil {
		t.Fatal(err)
	}
	hostFile := filepath.Join(host, "hf")
	if err := os.WriteFile(hostFile, []byte("h\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var before unix.Stat_t
	if err := unix.Lstat(hostFile, &before); err != nil {
		t.Fatal(err)
	}
	const t1, t2 = 1767225609710019831, 1767225610123456789
	d := runTrial(t, r, dir, dryexec.TrialSpec{}, "/usr/bin/python3", "-c", `
import os, sys
t1, t2 = int(sys.argv[1]), int(sys.argv[2])
open("f", "w").write("f\n")
os.mkdir("d")
os.utime("f", ns=(t1, t1))
os.utime("d", ns=(t1, t1))
os.symlink("f", "lf")
os.utime("lf", ns=(t2, t2), follow_symlinks=False)
os.symlink(sys.argv[3], "link")
os.utime("link/hf", ns=(t2, t2))
pid = os.fork()
if pid == 0:
    os.setresgid(65534, 65534, 65534)
    os.setresuid(65534, 65534, 65534)
    try:
        os.utime("f", ns=(t2, t2))
        print("nobody: set", flush=True)
    except PermissionError:
        print("nobody: EPERM", flush=True)
    os._exit(0)
os.waitpid(pid, 0)
print(os.stat("f").st_mtime_ns == t1, os.lstat("lf").st_mtime_ns == t2, os.stat("link/hf").st_mtime_ns == t2)
`, "1767225609710019831", "1767225610123456789", host)
	want := "nobody: EPERM\nTrue True True\n"
	if d.Process.Stdout != want || d.Incomplete {
		t.Errorf("stdout %q (stderr %q), want %q; incomplete %v %s", d.Process.Stdout, d.Process.Stderr, want, d.Incomplete, d.IncompleteReason)
	}
	files := map[string]dryexec.FileChange{}
	for _, f := range d.Files {
		files[f.Path] = f
	}
	for name, want := range map[string]int64{"f": t1, "d": t1, "lf": t2} {
		if f, ok := files[filepath.Join(dir, name)]; !ok || f.MtimeNS != want {
			t.Errorf("%s: %+v, want mtime %d", name, f, want)
		}
	}
	var after unix.Stat_t
	if err := unix.Lstat(hostFile, &after); err != nil {
		t.Fatal(err)
	}
	if after.Mtim != before.Mtim {
		t.Errorf("the host file's mtime changed: %v, was %v", after.Mtim, before.Mtim)
	}
}
