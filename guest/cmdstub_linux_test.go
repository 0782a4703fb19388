package guest

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/wire"
)

// stubExes are the stubs this architecture has: the native one (where it
// exists) and the guest binary in wire.RoleStub. Both must speak one protocol.
func stubExes(t testing.TB) map[string]*stubExe {
	exes := map[string]*stubExe{"guest": guestStubExe()}
	if stubELF != "" {
		fd, err := stubMemfd()
		if err != nil {
			t.Fatalf("stubMemfd: %v", err)
		}
		t.Cleanup(func() { unix.Close(fd) })
		exes["native"] = &stubExe{path: "/proc/self/fd/" + strconv.Itoa(fd), argv: []string{nativeStubName}}
	}
	return exes
}

// stubRun is one command run through a stub.
type stubRun struct {
	stdout, stderr string
	ws             unix.WaitStatus
	startErr       error
	mem            *wire.MemoryUse
	// own is the stub's report of its CPU time before the command; total
	// the process's whole (the stub's and then the command's) when reaped.
	own, total time.Duration
}

// runThroughStub starts a stub, seizes it when trace is set, hands it r as
// the host does (nil: no request) and waits. It runs on one locked thread:
// the tracer.
func runThroughStub(t testing.TB, exe *stubExe, r *wire.TrialRun, stdinData string, trace bool) stubRun {
	return runStubOpts(t, exe, r, stubOpts{stdin: stdinData, trace: trace})
}

// stubOpts: what the stub's stdin holds; trace it; nproc its RLIMIT_NPROC;
// early: the request is in the pipe before the stub starts (as when the
// host writes it while the guest is still starting the stub).
type stubOpts struct {
	stdin        string
	trace, early bool
	nproc        int64
	// lastAtExit, when set, gets whether the command was the last task
	// alive (memTracer.lastAlive) at its exit stop.
	lastAtExit *bool
	// nested hands the stub a nested Landlock ruleset (nestedRuleset);
	// blocked starts it from a thread that blocks every signal, as the
	// launcher does.
	nested, blocked bool
}

func runStubOpts(t testing.TB, exe *stubExe, r *wire.TrialRun, o stubOpts) stubRun {
	t.Helper()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	pipe := func() (*os.File, *os.File) {
		rd, wr, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		return rd, wr
	}
	outR, outW := pipe()
	errR, errW := pipe()
	inR, inW := pipe()
	reqR, reqW := pipe()
	send := func() {
		if r != nil {
			req, err := wire.StubRequest(r)
			if err == nil {
				_, err = reqW.Write(req)
			}
			if err != nil {
				t.Fatalf("request: %v", err)
			}
		}
		reqW.Close() // without a request: the stub is discarded
	}
	if o.early {
		send()
	}
	var mt *memTracer
	if o.trace {
		mt = &memTracer{}
	}
	ruleset := ^uintptr(0)
	if o.nested {
		rs, err := nestedRuleset()
		if err != nil || rs < 0 {
			t.Fatalf("nestedRuleset: %d, %v", rs, err)
		}
		defer unix.Close(rs)
		ruleset = uintptr(rs)
	}
	if o.blocked {
		var old unix.Sigset_t
		if err := unix.PthreadSigmask(unix.SIG_SETMASK, nil, &old); err != nil {
			t.Fatal(err)
		}
		if err := blockAllSignals(); err != nil {
			t.Fatal(err)
		}
		defer unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil)
	}
	stub, err := startStub(exe, &syscall.SysProcAttr{Setsid: true}, o.nproc, outW.Fd(), errW.Fd(), reqR.Fd(), inR.Fd(), ruleset, mt)
	outW.Close()
	errW.Close()
	inR.Close()
	reqR.Close()
	if err != nil {
		t.Fatalf("startStub: %v", err)
	}
	go func() {
		io.WriteString(inW, o.stdin)
		inW.Close()
	}()

	drain := func(f *os.File) chan string {
		c := make(chan string, 1)
		go func() {
			b, _ := io.ReadAll(f)
			f.Close()
			c <- string(b)
		}()
		return c
	}
	stdout, stderr := drain(outR), drain(errR)
	var run stubRun
	if !o.early {
		send()
	}
	for {
		var ru unix.Rusage
		wpid, err := unix.Wait4(-1, &run.ws, unix.WALL, &ru)
		if err != nil {
			t.Fatalf("wait: %v", err)
		}
		if wpid == stub.pid && !run.ws.Stopped() {
			run.total = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		}
		if run.ws.Stopped() {
			if mt == nil {
				t.Fatalf("untraced stub stopped: %v", run.ws)
			}
			if o.lastAtExit != nil && wpid == stub.pid && run.ws.TrapCause() == unix.PTRACE_EVENT_EXIT {
				*o.lastAtExit = mt.lastAlive(stub.pid)
			}
			mt.stopped(wpid, run.ws)
			continue
		}
		if mt != nil {
			mt.gone(wpid)
		}
		if wpid == stub.pid {
			break
		}
	}
	// What the command left behind dies, as in the guest's sweep: traced, it
	// would otherwise sit in a ptrace stop holding the output pipes.
	unix.Kill(-stub.pid, unix.SIGKILL)
	for {
		var ws unix.WaitStatus
		wpid, err := unix.Wait4(-1, &ws, unix.WALL, nil)
		if err == unix.ECHILD {
			break
		}
		if err == nil && ws.Stopped() && mt != nil {
			mt.stopped(wpid, ws) // resumed, it dies of the SIGKILL
		}
	}
	run.startErr = stub.startError()
	run.own = stub.ownUser + stub.ownSys
	run.stdout, run.stderr = <-stdout, <-stderr
	if mt != nil {
		run.mem = mt.result()
	}
	return run
}

func TestStubProtocol(t *testing.T) {
	dir := t.TempDir()
	var big []string // more than a pipe holds
	for i := range 300 {
		big = append(big, "BIG"+strconv.Itoa(i)+"="+strings.Repeat("x", 1024))
	}
	// noexec holds an "sh" that is not executable; dir a script "here" and
	// a plain file "file".
	noexec := dir + "/noexec"
	if err := os.Mkdir(noexec, 0o755); err != nil {
		t.Fatal(err)
	}
	for p, body := range map[string]string{noexec + "/sh": "", dir + "/file": ""} {
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(dir+"/here", []byte("#!/bin/sh\necho here\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	sh := func(script string, env ...string) *wire.TrialRun {
		return &wire.TrialRun{Argv: []string{"/bin/sh", "-c", script, "arg 0", ""}, Env: env, Cwd: dir}
	}
	cases := []struct {
		name   string
		run    *wire.TrialRun
		stdin  string
		stdout string // wanted; both streams are compared when err is nil
		code   int
		err    unix.Errno // a start error
		stage  uint32
	}{
		{name: "argv env cwd", run: sh(`printf '%s|%s|%s|%s|' "$0" "$1" "$FOO" "$EMPTY"; pwd`, "FOO=a b", "EMPTY="),
			stdout: "arg 0||a b||" + dir + "\n"},
		{name: "exit status", run: sh(`exit 7`), code: 7},
		{name: "stdin when asked", run: func() *wire.TrialRun { r := sh(`cat`); r.Stdin = true; return r }(), stdin: "piped\n", stdout: "piped\n"},
		{name: "devnull otherwise", run: sh(`cat; echo end`), stdin: "piped\n", stdout: "end\n"},
		{name: "no protocol fds leak", run: sh(`for f in 3 4 5 6; do [ -e /proc/$$/fd/$f ] && echo leak $f; done; echo ok`), stdout: "ok\n"},
		{name: "big env", run: sh(`printf %s "$BIG299" | wc -c`, big...), stdout: "1024\n"},
		{name: "argument too long", run: sh(`true`, "BIG="+strings.Repeat("x", 200<<10)), err: unix.E2BIG, stage: stubStageExec},
		{name: "no such program", run: &wire.TrialRun{Argv: []string{dir + "/nope"}, Cwd: dir}, err: unix.ENOENT, stage: stubStageExec},
		{name: "not executable", run: &wire.TrialRun{Argv: []string{"/etc/passwd"}, Cwd: dir}, err: unix.EACCES, stage: stubStageExec},
		{name: "no such directory", run: &wire.TrialRun{Argv: []string{"/bin/true"}, Cwd: dir + "/gone"}, err: unix.ENOENT, stage: stubStageChdir},
		{name: "found in PATH", run: &wire.TrialRun{Argv: []string{"sh", "-c", "echo found"}, Env: []string{"PATH=/no/such/dir:" + dir + "/file:/bin"}, Cwd: dir},
			stdout: "found\n"},
		{name: "not executable in PATH, then found", run: &wire.TrialRun{Argv: []string{"sh", "-c", "echo found"}, Env: []string{"PATH=" + noexec + ":/bin"}, Cwd: dir},
			stdout: "found\n"},
		{name: "empty PATH entry is the directory", run: &wire.TrialRun{Argv: []string{"here"}, Env: []string{"PATH=/no/such/dir:"}, Cwd: dir},
			stdout: "here\n"},
		{name: "not in PATH", run: &wire.TrialRun{Argv: []string{"no-such-program-dryexec"}, Env: []string{"PATH=/bin:/usr/bin"}, Cwd: dir}, err: unix.ENOENT, stage: stubStageExec},
		{name: "only not executable in PATH", run: &wire.TrialRun{Argv: []string{"sh"}, Env: []string{"PATH=" + noexec}, Cwd: dir}, err: unix.EACCES, stage: stubStageExec},
		{name: "no PATH", run: &wire.TrialRun{Argv: []string{"sh"}, Cwd: dir}, err: unix.ENOENT, stage: stubStageExec},
		{name: "discarded unused"},
	}
	for kind, exe := range stubExes(t) {
		for _, tc := range cases {
			t.Run(kind+"/"+tc.name, func(t *testing.T) {
				got := runThroughStub(t, exe, tc.run, tc.stdin, false)
				if tc.err != 0 {
					var se *stubError
					if !errors.As(got.startErr, &se) || se.Errno != tc.err || se.Stage != tc.stage {
						t.Fatalf("start error %v, want %v at stage %d", got.startErr, tc.err, tc.stage)
					}
					if got.ws.ExitStatus() != 127 {
						t.Errorf("stub exited %v, want 127", got.ws)
					}
					return
				}
				if got.startErr != nil {
					t.Fatalf("start error: %v", got.startErr)
				}
				if got.stdout != tc.stdout || got.stderr != "" || got.ws.ExitStatus() != tc.code {
					t.Errorf("exit %d, stdout %q, stderr %q; want exit %d, stdout %q", got.ws.ExitStatus(), got.stdout, got.stderr, tc.code, tc.stdout)
				}
			})
		}
	}
}

// TestStubTraced: a seized stub's command (and what it forks and execs) is
// measured at each exit without any stop at its execs.
func TestStubTraced(t *testing.T) {
	for kind, exe := range stubExes(t) {
		t.Run(kind, func(t *testing.T) {
			r := &wire.TrialRun{Argv: []string{"/bin/sh", "-c", `/bin/true; head -c 4000000 /dev/zero | cat >/dev/null; echo done`}, Cwd: "/"}
			got := runThroughStub(t, exe, r, "", true)
			if got.startErr != nil || got.stdout != "done\n" || got.ws.ExitStatus() != 0 {
				t.Fatalf("exit %v, stdout %q, start error %v", got.ws, got.stdout, got.startErr)
			}
			if got.mem == nil || got.mem.Processes < 4 || got.mem.PagesWritten == 0 {
				t.Fatalf("memory %+v: want the exits of sh, true, head and cat measured", got.mem)
			}
		})
	}
}

// TestStubGate: a command that is in the request pipe before its stub
// starts (the host writes it whenever it likes) still runs traced from its
// first instruction and under its RLIMIT_NPROC: the stub waits for the
// guest's gate. The guest is made slow to set the stub up, so that without
// the gate the command would win the race.
func TestStubGate(t *testing.T) {
	r := &wire.TrialRun{Argv: []string{"/bin/grep", "Max processes", "/proc/self/limits"}, Cwd: "/"}
	for kind, exe := range stubExes(t) {
		t.Run(kind, func(t *testing.T) {
			slow := *exe
			setSlowStart(t, &slow, func() { time.Sleep(50 * time.Millisecond) })
			for range 3 {
				got := runStubOpts(t, &slow, r, stubOpts{trace: true, early: true, nproc: 4242})
				if got.startErr != nil || !strings.Contains(got.stdout, " 4242 ") {
					t.Fatalf("stdout %q, start error %v: the command ran before its limit was set", got.stdout, got.startErr)
				}
				if got.mem == nil || got.mem.Processes < 1 {
					t.Fatalf("memory %+v: the command ran before it was traced", got.mem)
				}
			}
		})
	}
}

// TestLastAlive tries to make the tracer believe the command is the last
// task alive when it is not: trial.exit goes early on that belief, and the
// host then reads the containment's counters while the others could still
// act. Whatever the command leaves running (a background child, a child
// forked an instant before the exit, a thread) must count; children that
// ended before must not.
func TestLastAlive(t *testing.T) {
	exe := stubExes(t)["native"]
	if exe == nil {
		exe = guestStubExe()
	}
	cases := []struct {
		name, script string
		last         bool
	}{
		{"alone", "exit 0", true},
		{"children done before", "/bin/true; /bin/true | /bin/cat; exit 0", true},
		{"a background child", "sleep 0.3 & exit 0", false},
		{"a child forked as it exits", "exec /bin/sh -c 'sleep 0.3 & exit 0'", false},
		{"an orphaned grandchild", "(sleep 0.3 &) ; exit 0", false},
		{"a thread", "exec /usr/bin/python3 -c 'import threading,time,os; threading.Thread(target=time.sleep, args=(0.3,), daemon=True).start(); os._exit(0)'", false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if strings.Contains(tc.script, "python3") {
				testreq.NeedPython(t)
			}
			var last bool
			got := runStubOpts(t, exe, &wire.TrialRun{Argv: []string{"/bin/sh", "-c", tc.script}, Cwd: "/"}, stubOpts{trace: true, lastAtExit: &last})
			if got.startErr != nil {
				t.Fatal(got.startErr)
			}
			if last != tc.last {
				t.Fatalf("last alive at its exit: %v, want %v", last, tc.last)
			}
		})
	}
}

// landlockScope says whether this kernel has Landlock's signal scope (ABI 6).
func landlockScope(t *testing.T) bool {
	t.Helper()
	abi, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	return e == 0 && abi >= 6
}

// TestStubConfines: a stub started from a thread that blocks every signal
// (the launcher) runs its command with none blocked, and with a nested
// ruleset the command cannot signal the process that started the stub (it
// is outside the command's domain), while it still signals its own child.
// Both stubs.
func TestStubConfines(t *testing.T) {
	script := `grep SigBlk /proc/self/status
kill -0 $PPID 2>/dev/null && echo parent-reached || echo parent-refused
sleep 100 & kill -TERM $! && wait $!; echo child=$?`
	r := &wire.TrialRun{Argv: []string{"/bin/sh", "-c", script}, Cwd: "/"}
	for kind, exe := range stubExes(t) {
		for _, nested := range []bool{false, true} {
			t.Run(kind+"/nested="+strconv.FormatBool(nested), func(t *testing.T) {
				if nested && !landlockScope(t) {
					testreq.Needf(t, testreq.Kernel, "Landlock ABI 6", errors.New("no Landlock signal scope on this kernel"))
				}
				got := runStubOpts(t, exe, r, stubOpts{blocked: true, nested: nested})
				if got.startErr != nil {
					t.Fatal(got.startErr)
				}
				want := "SigBlk:\t0000000000000000\nparent-reached\nchild=143\n"
				if nested {
					want = "SigBlk:\t0000000000000000\nparent-refused\nchild=143\n"
				}
				if got.stdout != want {
					t.Errorf("stdout %q, want %q (stderr %q)", got.stdout, want, got.stderr)
				}
			})
		}
	}
}

// TestTrampoline: a process started through the exec trampoline from a
// thread that blocks every signal runs its program, with its argv[0], its
// arguments and its environment, and with no signal blocked; a program that
// cannot be run exits 127 and says so. Both stubs.
func TestTrampoline(t *testing.T) {
	for kind, exe := range stubExes(t) {
		t.Run(kind, func(t *testing.T) {
			run := func(path string, args ...string) (string, string, int) {
				cmd := exec.Command(path, args...)
				cmd.Args[0] = "argv0"
				cmd.Env = []string{"FOO=bar"}
				var out, errb strings.Builder
				cmd.Stdout, cmd.Stderr = &out, &errb
				execTrampoline(cmd, exe)
				runtime.LockOSThread()
				var old unix.Sigset_t
				unix.PthreadSigmask(unix.SIG_SETMASK, nil, &old)
				if err := blockAllSignals(); err != nil {
					t.Fatal(err)
				}
				err := cmd.Start()
				unix.PthreadSigmask(unix.SIG_SETMASK, &old, nil)
				runtime.UnlockOSThread()
				if err != nil {
					t.Fatal(err)
				}
				cmd.Wait()
				return out.String(), errb.String(), cmd.ProcessState.ExitCode()
			}
			out, errs, code := run("/bin/sh", "-c", `echo "$0|$1|$FOO"; tr '\0' '\n' </proc/$$/cmdline | head -1; grep SigBlk /proc/self/status`, "zero", "one")
			if want := "zero|one|bar\nargv0\nSigBlk:\t0000000000000000\n"; out != want || code != 0 {
				t.Errorf("exit %d, stdout %q, stderr %q; want %q", code, out, errs, want)
			}
			out, errs, code = run("/no/such/program")
			if code != 127 || out != "" || !strings.Contains(errs, "dryexec: cannot execute") {
				t.Errorf("a missing program: exit %d, stdout %q, stderr %q", code, out, errs)
			}
		})
	}
}

// TestStubReportsOwnCPU: the stub reports its own CPU time before its
// first exec of the command, so that the command's time can leave it out;
// the report is read beside a failure after it (an exec that fails) and is
// absent for one before it (a cwd that does not exist). Both stubs: the
// native one and the guest playing it.
func TestStubReportsOwnCPU(t *testing.T) {
	tests := []struct {
		name    string
		run     wire.TrialRun
		wantErr bool // a start error
		report  bool // the stub's report of its time
	}{
		{"exec", wire.TrialRun{Argv: []string{"/bin/true"}, Cwd: "/"}, false, true},
		{"exec fails", wire.TrialRun{Argv: []string{"/nonexistent/cmd"}, Cwd: "/"}, true, true},
		{"chdir fails", wire.TrialRun{Argv: []string{"/bin/true"}, Cwd: "/nonexistent"}, true, false},
	}
	for _, exe := range []struct {
		name string
		exe  *stubExe
	}{{"native", newStubExe()}, {"guest", guestStubExe()}} {
		if exe.name == "native" && !exe.exe.native() {
			continue
		}
		for _, tt := range tests {
			t.Run(exe.name+"/"+tt.name, func(t *testing.T) {
				r := runThroughStub(t, exe.exe, &tt.run, "", true)
				if (r.startErr != nil) != tt.wantErr {
					t.Fatalf("start error %v, want one: %v", r.startErr, tt.wantErr)
				}
				if !tt.report {
					if r.own != 0 {
						t.Errorf("a stub that failed before its report: own time %v", r.own)
					}
					return
				}
				// Its own start (an exec) took some CPU, and the process as
				// a whole (the stub, then the command) took more.
				if r.own <= 0 || r.own > r.total {
					t.Errorf("the stub reported %v of its own, the process took %v in all", r.own, r.total)
				}
			})
		}
	}
}
