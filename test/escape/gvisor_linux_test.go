package escape

import (
	"context"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/rung/gvisor"
	"github.com/dryexec/dryexec/session"
	"github.com/dryexec/dryexec/wire"
)

const gvisorName = gvisor.Name

// gvisorRefusal is how an attempt says the kernel refused it: the Python
// attempts print "refused NAME ERRNO", the shell ones the tool's error.
var gvisorRefusal = regexp.MustCompile(`(?m)^refused |Operation not permitted|Permission denied|not implemented|Function not implemented|Read-only file system|No such file or directory|Connection refused|Bad address|Invalid argument|Cannot fork|Resource temporarily unavailable`)

// gvisorRefused: on gvisor a refusal is gVisor's kernel answering with an
// error, which it does not record as a violation (no seccomp supervisor
// reports it, docs/architecture.md "The gvisor rung"): the attempt's own
// output is the record.
func gvisorRefused(d *dryexec.StateDelta) bool {
	return gvisorRefusal.MatchString(d.Process.Stdout + d.Process.Stderr)
}

// TestEscapeGVisor runs the escape corpus on the gvisor rung: the host must
// be unchanged and no attempt may report success; each refusal must be on
// record, as ns records it (a violation, a file in the delta, a timeout) or
// as the error the attempt met.
func TestEscapeGVisor(t *testing.T) {
	testreq.NeedRoot(t)
	testreq.Need(t, testreq.GVisor, (&gvisor.Rung{}).Available(context.Background()))
	for _, a := range attempts {
		t.Run(a.name, func(t *testing.T) {
			if a.amd64 && runtime.GOARCH != "amd64" {
				t.Skip("uses amd64 syscall numbers")
			}
			runOn(t, &gvisor.Rung{}, a)
		})
	}
}

// TestSignalsToGuestGVisor: SIGKILL and SIGSTOP aimed at the guest
// supervisor inside gVisor, whose kernel (unlike Linux) delivers both to its
// init from inside: by kill and rt_sigqueueinfo of pid 1, by tkill, tgkill
// and rt_tgsigqueueinfo of each of its threads, and as the I/O signal of a
// pipe owned by pid 1 or by each thread (F_SETOWN_EX, F_SETSIG); then every
// other signal to -1. The trial's delta is whole and the session's next execs
// run. Before, a session's exec ran without the trial's seccomp profile
// (`kill -9 1` lost the session), and a SIGKILL I/O signal ended the guest of
// a trial. The "threads" subtests aim kill and rt_sigqueueinfo at each
// thread id /proc/1/task lists and at every small number, and
// pidfd_send_signal at /proc/1 and each /proc/TID directory (before, each
// ended the guest: the trial's delta was incomplete, the session lost); the
// command's /proc, even after a chroot breakout, shows its pid namespace's
// init as pid 1, never the guest.
func TestSignalsToGuestGVisor(t *testing.T) {
	testreq.NeedRoot(t)
	testreq.Need(t, testreq.GVisor, (&gvisor.Rung{}).Available(context.Background()))
	t.Run("trial", func(t *testing.T) { signalsToGuestTrial(t, &gvisor.Rung{}, gvisorSignalAttack) })
	t.Run("session", func(t *testing.T) { signalsToGuestSession(t, gvisorName, gvisorSignalAttack) })
	t.Run("threads/trial", gvisorThreadsTrial)
	t.Run("threads/session", gvisorThreadsSession)
}

// gvisorAttackPrologue is the gvisor attacks' start: the tag (from the
// environment, or a global the Python exec set), a raw syscall helper, and
// before-TAG.txt written.
const gvisorAttackPrologue = `
import ctypes, os, signal, struct, json, fcntl, subprocess
TAG = os.environ.get("TAG") or globals().get("TAG", "x")
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sc(nr, *a):
    return libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(x) if isinstance(x, int) else x for x in a])
with open("before-%s.txt" % TAG, "w") as f:
    f.write("before\n")
`

// gvisorThreadAttack first tries to chroot out of its root (to find the
// sandbox's /proc), then aims SIGSTOP and SIGKILL by kill and
// rt_sigqueueinfo at every number up to 64 and every thread id /proc/1/task
// lists (without a pid namespace of the command's: the guest's, /proc being
// the sandbox's), and pidfd_send_signal through /proc/1 and each such
// /proc/TID directory, with every flag. The command runs in a pid namespace
// of its own, where those numbers may name its own processes, or the
// threads of that namespace's init, whose end kills the namespace: the
// attack may end itself (SIGKILL) before "attack-done", which is its own
// doing. What must hold is the guest: a complete delta with before-TAG.txt,
// a session whose next execs run.
const gvisorThreadAttack = gvisorAttackPrologue + `
def proc1():
    try:
        return open("/proc/1/cmdline").read().replace("\0", " ").strip()
    except OSError as e:
        return "none (%s)" % e.strerror
print("pid 1 is", proc1(), flush=True)
# chroot is let through inside gVisor (a command's process chroots to its
# pid namespace's root): try to leave that root for the sandbox's /proc,
# then come back.
top = os.open("/", os.O_RDONLY)
try:
    os.makedirs("jail-" + TAG, exist_ok=True)
    os.chroot("jail-" + TAG)
    os.fchdir(top)
    for _ in range(64):
        os.chdir("..")
    os.chroot(".")
    print("after a chroot breakout, pid 1 is", proc1(), flush=True)
    os.fchdir(top)
    os.chroot(".")
except OSError as e:
    print("chroot refused", e.errno, flush=True)
# pid 1 (the namespace's init, outside the command's seccomp filter) is
# no more the command's to take over than the guest is.
try:
    os.close(os.open("/proc/1/mem", os.O_RDWR))
    print("pid 1 taken: its mem opened", flush=True)
except OSError:
    pass
if libc.ptrace(ctypes.c_long(16), ctypes.c_long(1), None, None) == 0:
    print("pid 1 taken: ptrace attached", flush=True)
listed = sorted(int(t) for t in os.listdir("/proc/1/task"))
print("pid 1's threads", listed, flush=True)
# Every small number too, whatever /proc lists: the guest's thread ids are
# the sandbox's first. pid 1's own last (in a pid namespace of the
# command's, its end ends the attack).
tids = [n for n in range(1, 65) if n not in listed] + listed
info = ctypes.create_string_buffer(128)
sent = {}
def tally(name, rc):
    k = name + (":sent" if rc >= 0 else ":refused-%d" % ctypes.get_errno())
    sent[k] = sent.get(k, 0) + 1
dirs = []
for p in ["/proc/1"] + ["/proc/%d" % t for t in tids if os.path.isdir("/proc/%d" % t)]:
    try:
        dirs.append(os.open(p, os.O_DIRECTORY | os.O_RDONLY))
    except OSError:
        pass
for sig in (signal.SIGSTOP, signal.SIGKILL):
    struct.pack_into("iii", info, 0, sig, 0, -1)
    for fd in dirs:
        for fl in (0, 1, 2, 4):
            tally("pidfd_send_signal", sc(424, fd, sig, None, fl))
for sig in (signal.SIGSTOP, signal.SIGKILL):
    struct.pack_into("iii", info, 0, sig, 0, -1)
    for tid in tids:
        if tid in (os.getpid(), os.getppid()):
            continue
        tally("rt_sigqueueinfo", sc(129, tid, sig, info))
        tally("kill", sc(62, tid, sig))
print("attack-done", json.dumps(sent, sort_keys=True), flush=True)
`

// gvisorThreadsTrial: gvisorThreadAttack as a trial's command.
func gvisorThreadsTrial(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	d, err := (&gvisor.Rung{}).Trial(ctx, dryexec.TrialSpec{Action: dryexec.Action{
		Argv: []string{"/usr/bin/python3", "-c", gvisorThreadAttack}, Cwd: dir, TimeoutMS: 120_000,
		Env: map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin", "TAG": "trial"},
	}})
	if err != nil {
		t.Fatalf("the trial failed (the guest did not survive the attack): %v", err)
	}
	validate(t, d)
	t.Logf("exit %d (%s)\n%s%s", d.Process.ExitCode, d.Process.Signal, d.Process.Stdout, d.Process.Stderr)
	if d.Incomplete {
		t.Fatalf("the delta is incomplete (the guest did not report): %s", d.IncompleteReason)
	}
	if d.Process.ExitCode != 0 && d.Process.Signal != "SIGKILL" {
		t.Errorf("the command exited %d (%s), want 0 or its own SIGKILL", d.Process.ExitCode, d.Process.Signal)
	}
	p := filepath.Join(dir, "before-trial.txt")
	if !slices.ContainsFunc(d.Files, func(c dryexec.FileChange) bool { return c.Path == p }) {
		t.Errorf("the delta lacks %s: %+v", p, d.Files)
	}
	if strings.Contains(d.Process.Stdout, "pidfd_send_signal:sent") {
		t.Errorf("pidfd_send_signal through a /proc directory was not refused")
	}
	wantOwnProc(t, d.Process.Stdout)
}

// wantOwnProc fails unless the attack's output says its /proc showed its
// pid namespace's init as pid 1, and showed no other pid 1 (the guest) after
// a chroot breakout (the command's /proc is its namespace's, and no chroot
// leaves the root that has it for one that has the sandbox's), and that
// neither ptrace nor /proc/1/mem took pid 1 over.
func wantOwnProc(t *testing.T, out string) {
	t.Helper()
	own := "dryexec guest " + wire.RolePIDInit
	if !strings.Contains(out, "pid 1 is "+own+"\n") {
		t.Errorf("the command's /proc is not its pid namespace's (want pid 1 %q):\n%s", own, out)
	}
	if strings.Contains(out, "pid 1 taken") {
		t.Errorf("the command took pid 1 over:\n%s", out)
	}
	for _, m := range regexp.MustCompile(`(?m)pid 1 is (.*)$`).FindAllStringSubmatch(out, -1) {
		if m[1] != own && !strings.HasPrefix(m[1], "none (") {
			t.Errorf("the command saw pid 1 as %q", m[1])
		}
	}
}

// gvisorThreadsSession: gvisorThreadAttack from a session's shell exec and
// from its Python runner; the session's next execs run, and its workspace
// holds what the attacks wrote.
func gvisorThreadsSession(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	s, err := session.Open(ctx, session.Options{Rung: gvisorName})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	alive := func(when string) { t.Helper(); sessionAlive(ctx, t, s, when) }
	r, err := s.Shell(ctx, "TAG=shell /usr/bin/python3 - <<'EOF'\n"+gvisorThreadAttack+"\nEOF", 2*time.Minute)
	if err != nil {
		t.Fatalf("the attacking exec: %v", err)
	}
	t.Logf("shell attack: exit %d\n%s", r.ExitCode, r.Transcript)
	wantOwnProc(t, r.Transcript)
	alive("after the shell exec's attack")
	p, err := s.Python(ctx, "TAG = 'python'\n"+gvisorThreadAttack, nil, 2*time.Minute)
	if err != nil {
		t.Fatalf("the attacking Python exec: %v", err)
	}
	t.Logf("python attack:\n%s", p.Transcript)
	wantOwnProc(t, p.Transcript)
	alive("after the Python exec's attack")
	d, err := s.Diff(ctx, false)
	if err != nil {
		t.Fatalf("diff: %v", err)
	}
	written := map[string]bool{}
	for k := range d.Writes {
		written[filepath.Base(k)] = true
	}
	for _, name := range []string{"before-shell.txt", "before-python.txt"} {
		if !written[name] {
			t.Errorf("the workspace's diff lacks %s: %v", name, written)
		}
	}
}

// gvisorSignalAttack is signalAttack's shape (the same markers and files)
// with the two signals the guest cannot handle.
const gvisorSignalAttack = gvisorAttackPrologue + `
got = []
signal.signal(signal.SIGUSR1, lambda s, fr: got.append(s))
os.kill(os.getpid(), signal.SIGUSR1)
signal.pthread_kill(__import__("threading").get_ident(), signal.SIGUSR1)
print("self-ok" if len(got) == 2 else "self-FAILED %r" % got, flush=True)
child = subprocess.Popen(["sleep", "1000"])
os.kill(child.pid, signal.SIGKILL)
print("child-ok" if child.wait() == -signal.SIGKILL else "child-FAILED", flush=True)
# The listed thread ids of pid 1 and every small number (with a pid
# namespace of the command's, its /proc no longer lists the guest's).
tids = sorted(set(int(t) for t in os.listdir("/proc/1/task")) | set(range(2, 65)))
print("guest threads", tids, flush=True)
info = ctypes.create_string_buffer(128)
for sig in (signal.SIGSTOP, signal.SIGKILL):
    struct.pack_into("iii", info, 0, sig, 0, -1)
    sc(62, 1, sig)                 # kill
    sc(129, 1, sig, info)          # rt_sigqueueinfo
    for tid in tids:
        sc(200, tid, sig)          # tkill
        sc(234, 1, tid, sig)       # tgkill
        sc(297, 1, tid, sig, info) # rt_tgsigqueueinfo
        for kind in (0, 1):        # F_OWNER_TID, F_OWNER_PID
            r, w = os.pipe()
            try:
                fcntl.fcntl(r, 15, struct.pack("ii", kind, tid))
                fcntl.fcntl(r, 10, sig)
                fcntl.fcntl(r, fcntl.F_SETFL, fcntl.fcntl(r, fcntl.F_GETFL) | os.O_ASYNC)
                os.write(w, b"x")
            except OSError:
                pass
            os.close(r); os.close(w)
with open("after-%s.txt" % TAG, "w") as f:
    f.write("after\n")
print("attack-done", flush=True)
for sig in range(1, 65):
    if sig not in (signal.SIGKILL, signal.SIGSTOP):
        sc(62, -1, sig)
print("broadcast-done", flush=True)
`

// gvisorUnrecorded are the attempts whose refusal gvisor does not record,
// and why; (a) and (b) still hold for them. Everything else the corpus
// tries is refused on gvisor as on ns: the command runs under ns's seccomp
// profile there too, with no_new_privs.
var gvisorUnrecorded = map[string]string{
	"fork_bomb": "the pids limit is the command's RLIMIT_NPROC inside gVisor (the sandbox's processes are not the host's), " +
		"whose hits are not recorded, as under ns's rlimit fallback; rung/gvisor's TestPidsLimit checks that it holds",
}
