package escape

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/rootless"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/rung/linuxns"
	"github.com/dryexec/dryexec/session"
)

// signalAttack aims every signal, by every system call that sends one, at
// the guest supervisor: pid 1 and each of its threads (found in
// /proc/1/task), each thread id also as the name of its whole process (kill,
// rt_sigqueueinfo, a /proc/TID pidfd, F_SETOWN), then at every process group
// it can see and at -1. It also
// sets the guest's resource limits (a hard RLIMIT_CPU is a SIGKILL the
// kernel forces, RLIMIT_NOFILE 0 ends the walk). Around that it writes
// before-TAG.txt and after-TAG.txt in its cwd, and checks that it can still
// signal itself and its own child. It prints "attack-done" once everything
// aimed at pid 1 was sent; the broadcasts come after (SIGKILL to -1 last,
// which in a session also kills the shell the attack runs in).
//
// Whether a call returned 0 says nothing about the guest: a signal the kernel
// queues on a thread that blocks it is "sent". What the tests assert is that
// the guest is unharmed: the trial's delta is complete, the session's next
// exec runs.
const signalAttack = `
import ctypes, os, signal, struct, fcntl, subprocess, sys, time, json
TAG = os.environ.get("TAG") or globals().get("TAG", "x")
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
NR = dict(kill=62, tkill=200, tgkill=234, rt_sigqueueinfo=129, rt_tgsigqueueinfo=297,
          pidfd_open=434, pidfd_send_signal=424, prlimit64=302)
def sc(name, *a):
    args = [ctypes.c_long(x) if isinstance(x, int) else x for x in a]
    return libc.syscall(ctypes.c_long(NR[name]), *args)
sent = {}
def tally(name, rc):
    k = name + (":sent" if rc >= 0 else ":refused")
    sent[k] = sent.get(k, 0) + 1
def info(sig, code):
    b = ctypes.create_string_buffer(128)
    struct.pack_into("iii", b, 0, sig, 0, code)
    struct.pack_into("ii", b, 16, 12345, 0)
    return b
SI_QUEUE, PIDFD_THREAD = -1, 0o200
PIDFD_SIGNAL_THREAD, PIDFD_SIGNAL_THREAD_GROUP, PIDFD_SIGNAL_PROCESS_GROUP = 1, 2, 4
F_SETSIG, F_SETOWN_EX, F_OWNER_TID, F_OWNER_PID, F_OWNER_PGRP = 10, 15, 0, 1, 2

with open("before-%s.txt" % TAG, "w") as f:
    f.write("before\n")

# The command can still signal itself and its own child.
got = []
signal.signal(signal.SIGUSR1, lambda s, fr: got.append(s))
os.kill(os.getpid(), signal.SIGUSR1)
signal.pthread_kill(__import__("threading").get_ident(), signal.SIGUSR1)
print("self-ok" if len(got) == 2 else "self-FAILED %r" % got, flush=True)
child = subprocess.Popen(["sleep", "1000"])
os.kill(child.pid, signal.SIGTERM)
print("child-ok" if child.wait() == -signal.SIGTERM else "child-FAILED", flush=True)

sigs = list(range(1, 65))
tids = sorted(int(t) for t in os.listdir("/proc/1/task"))
print("guest threads", tids, flush=True)

def sigio(kind, who, sig):
    r, w = os.pipe()
    try:
        rc = 0
        try:
            if kind is None:
                fcntl.fcntl(r, fcntl.F_SETOWN, who)
            else:
                fcntl.fcntl(r, F_SETOWN_EX, struct.pack("ii", kind, who))
            fcntl.fcntl(r, F_SETSIG, sig)
            fcntl.fcntl(r, fcntl.F_SETFL, fcntl.fcntl(r, fcntl.F_GETFL) | os.O_ASYNC)
            os.write(w, b"x")
        except OSError:
            rc = -1
        tally("sigio", rc)
    finally:
        os.close(r); os.close(w)

# Resource limits of the guest, by its pid and each of its thread ids.
zero = (ctypes.c_ulong * 2)(0, 0)
for tid in tids:
    for res in (7, 0, 1, 6):  # NOFILE, CPU, FSIZE, NPROC
        tally("prlimit64", sc("prlimit64", tid, res, ctypes.addressof(zero), 0))

proc1 = os.open("/proc/1", os.O_DIRECTORY | os.O_RDONLY)
for sig in sigs:
    tally("kill", sc("kill", 1, sig))
    tally("rt_sigqueueinfo", sc("rt_sigqueueinfo", 1, sig, info(sig, SI_QUEUE)))
    for fl in (0, PIDFD_SIGNAL_THREAD, PIDFD_SIGNAL_THREAD_GROUP, PIDFD_SIGNAL_PROCESS_GROUP):
        tally("pidfd_send_signal(/proc/1)", sc("pidfd_send_signal", proc1, sig, None, fl))
        tally("pidfd_send_signal(/proc/1,info)", sc("pidfd_send_signal", proc1, sig, info(sig, SI_QUEUE), fl))
    fd = sc("pidfd_open", 1, 0)
    if fd >= 0:
        tally("pidfd_send_signal(pidfd 1)", sc("pidfd_send_signal", fd, sig, None, 0))
        os.close(fd)
    sigio(F_OWNER_PID, 1, sig)
    for tid in tids:
        tally("tgkill", sc("tgkill", 1, tid, sig))
        tally("tkill", sc("tkill", tid, sig))
        tally("rt_tgsigqueueinfo", sc("rt_tgsigqueueinfo", 1, tid, sig, info(sig, SI_QUEUE)))
        # A thread id names its whole process to the calls that signal a
        # process: allowed against one thread, they signal every thread.
        tally("kill(tid)", sc("kill", tid, sig))
        tally("rt_sigqueueinfo(tid)", sc("rt_sigqueueinfo", tid, sig, info(sig, SI_QUEUE)))
        fd = sc("pidfd_open", tid, PIDFD_THREAD)
        if fd >= 0:
            tally("pidfd_send_signal(thread pidfd)", sc("pidfd_send_signal", fd, sig, None, PIDFD_SIGNAL_THREAD))
            tally("pidfd_send_signal(thread pidfd,info)", sc("pidfd_send_signal", fd, sig, info(sig, SI_QUEUE), PIDFD_SIGNAL_THREAD))
            tally("pidfd_send_signal(thread pidfd,group)", sc("pidfd_send_signal", fd, sig, info(sig, SI_QUEUE), PIDFD_SIGNAL_THREAD_GROUP))
            os.close(fd)
        try:
            fd = os.open("/proc/%d" % tid, os.O_DIRECTORY | os.O_RDONLY)
            tally("pidfd_send_signal(/proc/tid)", sc("pidfd_send_signal", fd, sig, None, PIDFD_SIGNAL_THREAD))
            tally("pidfd_send_signal(/proc/tid,0)", sc("pidfd_send_signal", fd, sig, None, 0))
            tally("pidfd_send_signal(/proc/tid,group)", sc("pidfd_send_signal", fd, sig, info(sig, SI_QUEUE), PIDFD_SIGNAL_THREAD_GROUP))
            os.close(fd)
        except OSError:
            pass
        sigio(F_OWNER_TID, tid, sig)
        sigio(F_OWNER_PID, tid, sig)
        sigio(None, tid, sig)
with open("after-%s.txt" % TAG, "w") as f:
    f.write("after\n")
print("attack-done", json.dumps(sent, sort_keys=True), flush=True)

# Broadcasts: every process group in sight, then -1. Stops are undone at once
# so that the attack's own parents go on.
me = os.getpgid(0)
groups = set()
for p in os.listdir("/proc"):
    if p.isdigit():
        try:
            groups.add(int(open("/proc/%s/stat" % p).read().rsplit(")", 1)[1].split()[2]))
        except (OSError, IndexError, ValueError):
            pass
groups.discard(0); groups.discard(me)
for sig in sigs:
    if sig in (signal.SIGKILL,):
        continue
    for g in groups:
        sc("kill", -g, sig)
        sc("kill", -g, signal.SIGCONT)
    sc("kill", -1, sig)
    sc("kill", -1, signal.SIGCONT)
for g in groups:
    sc("kill", -g, signal.SIGKILL)
sc("kill", -1, signal.SIGKILL)
print("broadcast-done", flush=True)
`

// nsAvailable skips where the ns rung cannot run.
func nsAvailable(t *testing.T) {
	t.Helper()
	testreq.Need(t, testreq.NS, (&linuxns.Rung{}).Available(context.Background()))
}

// TestSignalsToGuestTrial: a trial's command aims every signal at the guest
// supervisor; the trial still returns a full delta with the command's files
// (before the fix, the guest died: "guest supervisor failed", no delta).
func TestSignalsToGuestTrial(t *testing.T) {
	nsAvailable(t)
	signalsToGuestTrial(t, &linuxns.Rung{}, signalAttack)
}

// signalsToGuestTrial is TestSignalsToGuestTrial on rung r with attack.
func signalsToGuestTrial(t *testing.T, r dryexec.Rung, attack string) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	d, err := r.Trial(ctx, dryexec.TrialSpec{Action: dryexec.Action{
		Argv: []string{"/usr/bin/python3", "-c", attack}, Cwd: dir, TimeoutMS: 120_000,
		Env: map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin", "TAG": "trial"},
	}})
	if err != nil {
		t.Fatalf("the trial failed (the guest did not survive the attack): %v", err)
	}
	validate(t, d)
	out := d.Process.Stdout + d.Process.Stderr
	t.Logf("exit %d, %d violations\n%s", d.Process.ExitCode, len(d.Violations), out)
	for _, want := range []string{"self-ok", "child-ok", "attack-done", "broadcast-done"} {
		if !strings.Contains(out, want) {
			t.Errorf("the command's output lacks %q", want)
		}
	}
	if d.Process.ExitCode != 0 {
		t.Errorf("the command exited %d, want 0", d.Process.ExitCode)
	}
	for _, f := range []string{"before-trial.txt", "after-trial.txt"} {
		p := filepath.Join(dir, f)
		if !slices.ContainsFunc(d.Files, func(c dryexec.FileChange) bool { return c.Path == p }) {
			t.Errorf("the delta lacks %s: %+v", p, d.Files)
		}
	}
	// Setting the guest's resource limits is refused by seccomp, and
	// reported (Landlock's refusals of the signals are not; gvisor's filter
	// refuses without a supervisor to report).
	if r.Name() == gvisorName {
		return
	}
	if !slices.ContainsFunc(d.Violations, func(v dryexec.Violation) bool { return strings.HasPrefix(v.Detail, "prlimit64(0x1,") }) {
		t.Errorf("no violation for prlimit64 aimed at the guest")
	}
}

// TestSignalsToGuestSession: the same attack from a session's shell exec and
// from its Python runner; every later exec still runs, the workspace holds
// the attack's files. Before the fix, every exec after the attack failed
// with session_lost.
func TestSignalsToGuestSession(t *testing.T) {
	nsAvailable(t)
	signalsToGuestSession(t, "ns", signalAttack)
}

// sessionAlive fails t unless s still runs a shell exec and a Python exec
// (when: after what).
func sessionAlive(ctx context.Context, t *testing.T, s *session.Session, when string) {
	t.Helper()
	r, err := s.Shell(ctx, "echo alive", 30*time.Second)
	if err != nil || r.ExitCode != 0 || r.Stdout != "alive\n" {
		t.Fatalf("%s: the session's next shell exec: %+v, %v", when, r, err)
	}
	p, err := s.Python(ctx, "print('py-alive')", nil, 30*time.Second)
	if err != nil || !strings.Contains(p.Transcript, "py-alive") {
		t.Fatalf("%s: the session's next Python exec: %+v, %v", when, p, err)
	}
}

// signalsToGuestSession is TestSignalsToGuestSession on the rung named rung
// with attack.
func signalsToGuestSession(t *testing.T, rung, attack string) {
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	s, err := session.Open(ctx, session.Options{Rung: rung})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	alive := func(when string) { t.Helper(); sessionAlive(ctx, t, s, when) }
	r, err := s.Shell(ctx, "TAG=shell /usr/bin/python3 - <<'EOF'\n"+attack+"\nEOF", 2*time.Minute)
	if err != nil {
		t.Fatalf("the attacking exec: %v", err)
	}
	t.Logf("shell attack: exit %d, %d violations\n%s", r.ExitCode, len(r.Violations), r.Transcript)
	for _, want := range []string{"self-ok", "child-ok", "attack-done"} {
		if !strings.Contains(r.Transcript, want) {
			t.Errorf("the shell attack's output lacks %q", want)
		}
	}
	alive("after the shell exec's attack")
	p, err := s.Python(ctx, "TAG = 'python'\n"+attack, nil, 2*time.Minute)
	if err != nil {
		t.Fatalf("the attacking Python exec: %v", err)
	}
	t.Logf("python attack: %d violations\n%s", len(p.Violations), p.Transcript)
	if !strings.Contains(p.Transcript, "attack-done") {
		t.Errorf("the Python attack's output lacks attack-done")
	}
	alive("after the Python exec's attack")
	d, err := s.Diff(ctx, false)
	if err != nil {
		t.Fatalf("diff: %v", err)
	}
	written := map[string]bool{}
	for k := range d.Writes {
		written[filepath.Base(k)] = true
	}
	for _, tag := range []string{"shell", "python"} {
		for _, f := range []string{"before-", "after-"} {
			if name := f + tag + ".txt"; !written[name] {
				t.Errorf("the workspace's diff lacks %s: %v", name, written)
			}
		}
	}
}

// TestSessionSignalsEarlierDaemon: an exec may signal a daemon an earlier
// exec of the same session left running (the execs share one Landlock
// domain; the guard against signalling the guest must not split them).
func TestSessionSignalsEarlierDaemon(t *testing.T) {
	nsAvailable(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	s, err := session.Open(ctx, session.Options{Rung: "ns"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	// The exec waits for the daemon to have its own session: what is
	// still in the exec's process group when the shell ends goes with it.
	r, err := s.Shell(ctx, "setsid sh -c 'echo $$ > daemon.pid; exec sleep 1000' </dev/null >/dev/null 2>&1 & until [ -s daemon.pid ]; do :; done", 30*time.Second)
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("starting the daemon: %+v, %v", r, err)
	}
	r, err = s.Shell(ctx, `pid=$(cat daemon.pid); kill -0 "$pid" && kill -TERM "$pid" && echo signalled; python3 -c "import os,time
for _ in range(500):
    if not os.path.exists('/proc/$pid') or open('/proc/$pid/stat').read().split(')')[1].split()[0] == 'Z': print('gone'); break
    time.sleep(0.01)"`, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.Stdout, "signalled") || !strings.Contains(r.Stdout, "gone") {
		t.Errorf("a later exec could not end an earlier exec's daemon: %q", r.Transcript)
	}
}

// TestSignalsRootless re-runs the signal tests as an unprivileged user.
func TestSignalsRootless(t *testing.T) {
	pass, _ := rootless.Rerun(t, "^(TestSignalsToGuest|TestSessionSignalsEarlierDaemon)", 10*time.Minute)
	if pass < 3 {
		t.Errorf("the rootless re-run passed %d tests, want 3", pass)
	}
}
