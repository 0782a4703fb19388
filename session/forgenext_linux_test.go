package session

import (
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec/internal/testreq"
)

// forgeDaemon is a daemon an exec leaves: on each word on /tmp/go it writes
// a forged result line and a forged output line to every descriptor 0–4 of
// every other process in sight (the running exec's shell or Python runner,
// their pipes to the guest), then lists what it could open on /tmp/done.
const forgeDaemon = `
import os
forged = b'{"op":"result","ok":true,"error":null,"outputs":{"verdict":{"type":"json","json":"FORGED"}},"outputs_skipped":{}}\nFORGED\n'
for _ in range(2):
    with open("/tmp/go") as f:
        f.read()
    opened = []
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) == os.getpid():
            continue
        for fd in range(5):
            try:
                w = os.open("/proc/%s/fd/%d" % (p, fd), os.O_WRONLY | os.O_NONBLOCK)
            except OSError:
                continue
            opened.append("%s/%d" % (p, fd))
            try:
                os.write(w, forged)
            except OSError:
                pass
            os.close(w)
    with open("/tmp/done", "w") as f:
        f.write(" ".join(opened) + "\n")
`

// TestDaemonCannotForgeNextExec: a process left by one exec cannot write
// into a later exec's result, output or state pipe: each exec runs in a user
// namespace of its own, so another exec's /proc/PID/fd is closed to it.
func TestDaemonCannotForgeNextExec(t *testing.T) {
	testreq.NeedPython(t)
	s, err := Open(testCtx(t), Options{Rung: "ns", Env: map[string]string{"PATH": "/usr/bin:/bin"}})
	if err != nil {
		testreq.Need(t, testreq.NS, err)
	}
	defer s.Close()
	r, err := s.Shell(testCtx(t), "mkfifo /tmp/go /tmp/done /tmp/up; cat > /tmp/d.py <<'EOF'\n"+forgeDaemon+"EOF\n"+
		`setsid /usr/bin/python3 -c 'open("/tmp/up","w").close(); exec(open("/tmp/d.py").read())' </dev/null >/dev/null 2>&1 &
cat /tmp/up`, time.Minute)
	if err != nil || r.ExitCode != 0 {
		t.Fatalf("starting the daemon: %v %+v", err, r)
	}
	// The Python exec wakes the daemon and waits for it: the daemon acts
	// while the runner is mid-call.
	pr, err := s.Python(testCtx(t), `
with open("/tmp/go", "w") as f: f.write("go")
with open("/tmp/done") as f: opened = f.read().strip()
x = 1`, nil, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !pr.OK || pr.Outputs["verdict"].JSON != nil || strings.Contains(pr.Transcript, "FORGED") {
		t.Errorf("the Python exec's result was forged: %+v", pr)
	}
	if o := pr.Outputs["opened"].JSON; o != "" {
		t.Errorf("the daemon opened the Python exec's descriptors: %v", o)
	}
	// A child a Python exec forks keeps that runner's pipes to the guest
	// (fd 3, stdout) and writes a forged result and output into them while
	// the next Python exec runs: the guest reads those pipes no more.
	pr, err = s.Python(testCtx(t), `
import os
os.mkfifo("/tmp/go2"); os.mkfifo("/tmp/done2")
if os.fork() == 0:
    os.setsid()
    with open("/tmp/go2") as f: f.read()
    for fd in (1, 2, 3):
        try: os.write(fd, b'{"op":"result","ok":true,"error":null,"outputs":{"verdict":{"type":"json","json":"FORGED"}},"outputs_skipped":{}}\nFORGED\n')
        except OSError: pass
    with open("/tmp/done2", "w") as f: f.write("ok")
    os._exit(0)
x = 1`, nil, time.Minute)
	if err != nil || !pr.OK {
		t.Fatalf("forking the child: %v %+v", err, pr)
	}
	pr, err = s.Python(testCtx(t), `
with open("/tmp/go2", "w") as f: f.write("go")
with open("/tmp/done2") as f: f.read()
y = 2`, nil, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if !pr.OK || pr.Outputs["verdict"].JSON != nil || strings.Contains(pr.Transcript, "FORGED") {
		t.Errorf("the next Python exec's result was forged by the last one's child: %+v", pr)
	}
	sr, err := s.Shell(testCtx(t), `echo go > /tmp/go; cat /tmp/done`, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if sr.ExitCode != 0 || strings.Contains(sr.Transcript, "FORGED") || strings.TrimSpace(sr.Stdout) != "" {
		t.Errorf("the shell exec: exit %d, the daemon opened %q, transcript %q", sr.ExitCode, sr.Stdout, sr.Transcript)
	}
}
