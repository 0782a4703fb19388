package gvisor

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/acceptance"
)

// TestAcceptance: the core scenario gives exactly its delta on gvisor, and
// the host is untouched.
func TestAcceptance(t *testing.T) {
	requireGVisor(t)
	dir := t.TempDir()
	if err := acceptance.MakeDir(dir); err != nil {
		t.Fatal(err)
	}
	d := runTrial(t, nil, dir, dryexec.TrialSpec{}, "/bin/sh", "-c", acceptance.Script)
	b, _ := json.MarshalIndent(d, "", " ")
	t.Logf("%s", b)
	if d.Rung != Name || d.Incomplete {
		t.Fatalf("rung %q incomplete %v (%s)", d.Rung, d.Incomplete, d.IncompleteReason)
	}
	if err := acceptance.Check(d, dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "a.txt")); err == nil {
		t.Fatal("a.txt reached the host")
	}
}

// TestCommandKillsGuest: the command tries to end or stop its supervisor
// (PID 1 of gVisor's pid namespace, the same uid) with every way a signal
// is sent. On ns Landlock's signal scope keeps it out; here the command's
// seccomp filter refuses any signal to PID 1 and the guest ignores the
// catchable ones: the trial ends with the guest's full report.
func TestCommandKillsGuest(t *testing.T) {
	requireGVisor(t)
	dir := t.TempDir()
	py := `import os, signal, ctypes
libc = ctypes.CDLL(None, use_errno=True)
for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1, signal.SIGSTOP, signal.SIGKILL):
    for name, call in (("kill", lambda: os.kill(1, s)), ("tgkill", lambda: libc.syscall(234, 1, 1, s)),
                       ("tkill", lambda: libc.syscall(200, 1, s)), ("sigqueue", lambda: libc.syscall(129, 1, s, 0))):
        try:
            r = call()
            if r is not None and r < 0:
                print("refused", name, s, ctypes.get_errno())
            elif r is None or r >= 0:
                print("sent", name, s)
        except OSError as e:
            print("refused", name, s, e.errno)
open("after.txt", "w").write("after")
`
	d := runTrial(t, nil, dir, dryexec.TrialSpec{}, "/usr/bin/python3", "-c", py)
	t.Logf("exit %d incomplete %v (%s)\n%s%s", d.Process.ExitCode, d.Incomplete, d.IncompleteReason, d.Process.Stdout, d.Process.Stderr)
	if d.Incomplete || d.Process.ExitCode != 0 {
		t.Fatalf("the guest did not report: incomplete %v exit %d", d.Incomplete, d.Process.ExitCode)
	}
	if strings.Contains(d.Process.Stdout, "sent") {
		t.Fatalf("a signal reached PID 1:\n%s", d.Process.Stdout)
	}
	if len(d.Files) != 1 || d.Files[0].Path != filepath.Join(dir, "after.txt") {
		t.Fatalf("files %+v, want after.txt alone", d.Files)
	}
}

// TestPidsLimit: the pids limit holds inside gVisor, whose processes the
// host's pids controller does not see: a command that starts more
// processes than the limit allows gets fork failures.
func TestPidsLimit(t *testing.T) {
	requireGVisor(t)
	py := `import os, time, errno
n = 0
for i in range(48):
    try:
        pid = os.fork()
    except OSError as e:
        print("refused", errno.errorcode[e.errno])
        break
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    n += 1
print("started", n)
`
	d := runTrial(t, nil, t.TempDir(), dryexec.TrialSpec{Limits: dryexec.Limits{Pids: 24}}, "/usr/bin/python3", "-c", py)
	n := -1
	if i := strings.Index(d.Process.Stdout, "started"); i >= 0 {
		fmt.Sscanf(d.Process.Stdout[i:], "started %d", &n)
	}
	if n < 0 || n >= 24 ||
		!strings.Contains(d.Process.Stdout, "refused EAGAIN") {
		t.Fatalf("under a limit of 24 processes:\n%s%s", d.Process.Stdout, d.Process.Stderr)
	}
}

// TestFIFOsReachTheDelta: gVisor keeps a FIFO made by mknod in its own
// memory (its gofer makes regular files only), where the host's walk of the
// upper dirs cannot see it; the trial guest finds each through runsc's
// strace and reports it, and the host makes it in the upper dirs. Every way
// of making one reaches the delta with its mode, also after a rename and a
// rename of its directory; a socket node stays refused with EPERM (commit
// makes none), and a regular file made by mknod is in the delta as before.
func TestFIFOsReachTheDelta(t *testing.T) {
	requireGVisor(t)
	dir := t.TempDir()
	py := `import os, stat, errno
def try_(name, f):
    try:
        f()
        print("made", name)
    except OSError as e:
        print("refused", name, errno.errorcode[e.errno])
try_("mkfifo", lambda: os.mkfifo("p1", 0o600))
try_("mknod_fifo", lambda: os.mknod("p2", 0o600 | stat.S_IFIFO))
os.mkdir("d")
try_("mknodat_fifo", lambda: os.mknod("p3", 0o640 | stat.S_IFIFO, dir_fd=os.open("d", os.O_RDONLY)))
try_("moved", lambda: (os.mkfifo("m1", 0o600), os.rename("m1", "d/m2")))
try_("dir_moved", lambda: (os.makedirs("e/f"), os.mkfifo("e/f/q", 0o644), os.rename("e", "e2")))
try_("mknod_sock", lambda: os.mknod("s1", 0o600 | stat.S_IFSOCK))
try_("mknod_reg", lambda: os.mknod("r1", 0o600 | stat.S_IFREG))
`
	d := runTrial(t, nil, dir, dryexec.TrialSpec{}, "/usr/bin/python3", "-c", py)
	t.Logf("exit %d\n%s%s", d.Process.ExitCode, d.Process.Stdout, d.Process.Stderr)
	for _, want := range []string{"made mkfifo", "made mknod_fifo", "made mknodat_fifo", "made moved", "made dir_moved",
		"refused mknod_sock EPERM", "made mknod_reg"} {
		if !strings.Contains(d.Process.Stdout, want) {
			t.Errorf("want %q in the command's output", want)
		}
	}
	if d.Incomplete {
		t.Errorf("incomplete: %s", d.IncompleteReason)
	}
	got := map[string]string{}
	for _, f := range d.Files {
		got[strings.TrimPrefix(f.Path, dir+"/")] = string(f.Kind) + " " + f.Mode
	}
	for p, want := range map[string]string{"p1": "fifo 0600", "p2": "fifo 0600", "d/p3": "fifo 0640",
		"d/m2": "fifo 0600", "e2/f/q": "fifo 0644", "r1": "file 0600"} {
		if got[p] != want {
			t.Errorf("%s: %q in the delta, want %q", p, got[p], want)
		}
	}
	for _, p := range []string{"s1", "m1", "e/f/q"} {
		if _, ok := got[p]; ok {
			t.Errorf("%s in the delta: %q", p, got[p])
		}
	}
}

// TestFIFOThroughLinkStaysInTheView: the host makes the FIFOs gVisor kept
// in its memory, at paths the sandbox reports; a path through a symlink the
// command made (to a host directory) must not lead the host out of the
// upper dirs: the host directory is untouched, and the FIFO is the delta's
// at the path the sandbox's kernel resolved it to in the view (the host
// directory's path), exactly, with the delta complete.
func TestFIFOThroughLinkStaysInTheView(t *testing.T) {
	requireGVisor(t)
	dir := t.TempDir()
	host := filepath.Join(t.TempDir(), "hostdir")
	if err := os.Mkdir(host, 0o755); err != nil {
		t.Fatal(err)
	}
	d := runTrial(t, nil, dir, dryexec.TrialSpec{}, "sh", "-c", "ln -s "+host+" link && mkfifo link/evil && mkdir link/sub && mkfifo -m 0640 link/sub/../evil2; echo done")
	for _, name := range []string{"evil", "evil2", "sub"} {
		if _, err := os.Lstat(filepath.Join(host, name)); err == nil {
			t.Fatalf("%s, made through the sandbox's link, is on the host", name)
		}
	}
	if d.Incomplete {
		t.Errorf("incomplete: %s", d.IncompleteReason)
	}
	files := map[string]dryexec.FileChange{}
	for _, f := range d.Files {
		files[f.Path] = f
	}
	for name, mode := range map[string]string{"evil": "0644", "evil2": "0640"} {
		f, ok := files[filepath.Join(host, name)]
		if !ok || f.Kind != "fifo" || f.Op != "create" || f.Mode != mode {
			t.Errorf("%s: %+v, want a FIFO made with mode %s (delta: %v, stdout %q)", name, f, mode, files, d.Process.Stdout)
		}
	}
	if _, ok := files[filepath.Join(dir, "link", "evil")]; ok {
		t.Errorf("the FIFO is in the delta at the link's path too")
	}
}
