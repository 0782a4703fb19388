package escape

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/guest"
	"github.com/dryexec/dryexec/internal/rootless"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/netsim/netrole"
	"github.com/dryexec/dryexec/rung/linuxns"
	"github.com/dryexec/dryexec/rung/vm"
	"github.com/dryexec/dryexec/schema"
)

// TestMain lets this test binary serve as the guest: the rung re-executes
// /proc/self/exe as `dryexec guest ns-trial`.
func TestMain(m *testing.M) {
	guest.MaybeMain(os.Args)
	netrole.MaybeMain(os.Args)
	testreq.OwnMountNamespace()
	os.Exit(m.Run())
}

// record is one way a refusal can be visible in the delta; an attempt names
// the ones it accepts, and at least one must be present.
type record struct {
	violation string         // a violation of this kind …
	detail    string         // … whose detail contains this
	output    *regexp.Regexp // or the command's stdout+stderr matches
	file      string         // or this path (relative to the trial dir) is a captured change
	timedOut  bool           // or the trial timed out
	warning   string         // or the delta warns (containment fell short) with this
}

func (r record) String() string {
	switch {
	case r.violation != "":
		return fmt.Sprintf("violation{%s %q}", r.violation, r.detail)
	case r.output != nil:
		return fmt.Sprintf("output =~ %s", r.output)
	case r.file != "":
		return "captured change of " + r.file
	case r.warning != "":
		return fmt.Sprintf("warning %q", r.warning)
	default:
		return "timed out"
	}
}

func violation(kind, detail string) record { return record{violation: kind, detail: detail} }
func output(re string) record              { return record{output: regexp.MustCompile(re)} }
func captured(rel string) record           { return record{file: rel} }

// syscallViolation is the record of a syscall the seccomp filter refused.
func syscallViolation(name string) record { return violation("syscall", name) }

// errRefused is what a command prints when the kernel refuses it on its own.
const errRefused = `(?i)(permission denied|operation not permitted|read-only file system|no such file|nonexistent|not mounted|not permitted|EPERM|EACCES|EROFS|ENOENT|refused)`

// secretText is the masked credential's content: no output may show it.
const secretText = "-----BEGIN OPENSSH PRIVATE KEY----- not-a-real-key"

// fixture is what every attempt runs against, on the host.
type fixture struct {
	dir    string // the trial's cwd
	canary string // a file in dir the attempts aim at
	target string // a file outside dir (root-only when run as root)
	sock   string // a listening unix socket on the host, outside dir
	secret string // a credential file outside dir, masked in every trial
}

// attempt is one scripted escape. Scripts print ESCAPED only if their attack
// worked; they get FIXTURE paths in the environment (CANARY, TARGET, SOCK,
// HOSTPID) and PY, a Python prelude with sc(nr, *args) for raw syscalls.
type attempt struct {
	name   string
	sh     string // run with /bin/sh -c
	py     string // or run with python3 -c (after the prelude)
	accept []record
	// tune adjusts the trial (limits, timeout) for bombs.
	tune func(*dryexec.TrialSpec)
	// watch are host paths the attempt aims at: each must read the same after
	// the trial as before (a write of the same value is still caught by (b)).
	watch []string
	// absent are host paths that must not exist after the trial.
	absent []string
	// amd64 marks attempts that use amd64 syscall numbers.
	amd64 bool
	// rootOnly skips the attempt in the rootless run (and says why).
	rootOnly string
	// smallRlimit marks attempts whose limit, rootless, becomes an rlimit on
	// the guest too: a race-instrumented guest (this test binary under
	// -race) cannot start within it, while the real dryexec-guest can.
	smallRlimit bool
}

// prelude gives Python scripts raw syscalls: sc returns (result, errno).
const prelude = `import ctypes, os, sys, socket, errno
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sc(nr, *a):
    args = [ctypes.c_char_p(x) if isinstance(x, bytes) else ctypes.c_long(x) for x in a]
    r = libc.syscall(ctypes.c_long(nr), *args)
    return r, ctypes.get_errno()
def attempt(name, r):
    rc, err = r
    if rc >= 0:
        print("ESCAPED", name, rc)
    else:
        print("refused", name, errno.errorcode.get(err, err), os.strerror(err))
def sock(name, *a):
    try:
        s = socket.socket(*a)
        print("ESCAPED", name, s.fileno())
    except OSError as e:
        print("refused", name, errno.errorcode.get(e.errno, e.errno), e.strerror)
`

func TestEscape(t *testing.T) {
	testreq.Need(t, testreq.NS, (&linuxns.Rung{}).Available(context.Background()))
	if len(attempts) < 40 {
		t.Fatalf("the corpus has %d attempts; it must keep at least 40", len(attempts))
	}
	seen := map[string]bool{}
	for _, a := range attempts {
		if seen[a.name] {
			t.Fatalf("duplicate attempt %s", a.name)
		}
		seen[a.name] = true
		t.Run(a.name, func(t *testing.T) {
			if a.amd64 && runtime.GOARCH != "amd64" {
				t.Skip("uses amd64 syscall numbers")
			}
			if a.rootOnly != "" && os.Getuid() != 0 {
				testreq.Needf(t, testreq.Root, a.rootOnly, testreq.ErrNotRoot)
			}
			if a.smallRlimit && raceEnabled && os.Getuid() != 0 {
				t.Skip("rootless, the memory limit is an RLIMIT_DATA on the guest as well, and this race-instrumented guest cannot start under it")
			}
			run(t, a)
		})
	}
}

// TestRootless re-runs the corpus as an unprivileged user (rootless ns rung).
func TestRootless(t *testing.T) {
	rootless.Rerun(t, "^TestEscape$", 10*time.Minute)
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	f := &fixture{dir: t.TempDir()}
	f.canary = filepath.Join(f.dir, "canary.txt")
	if err := os.WriteFile(f.canary, []byte("canary\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	outside := t.TempDir()
	f.target = filepath.Join(outside, "target.txt")
	if err := os.WriteFile(f.target, []byte("target\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	f.sock = filepath.Join(outside, "host.sock")
	f.secret = filepath.Join(outside, ".ssh", "id_rsa")
	if err := os.MkdirAll(filepath.Dir(f.secret), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.secret, []byte(secretText), 0o600); err != nil {
		t.Fatal(err)
	}
	return f
}

func run(t *testing.T, a attempt) { runOn(t, &linuxns.Rung{}, a) }

// runOn runs attempt a as a trial on rung r and checks that (a) the host is
// unchanged, (b) the attempt failed and (c) its refusal is on record.
func runOn(t *testing.T, r dryexec.Rung, a attempt) {
	f := newFixture(t)
	lis := listenUnix(t, f.sock)
	before := snapshot(t, f.dir, filepath.Dir(f.target))
	watched := readAll(a.watch)
	argv := []string{"/bin/sh", "-c", a.sh}
	if a.py != "" {
		argv = []string{"python3", "-c", prelude + a.py}
	}
	spec := dryexec.TrialSpec{Action: dryexec.Action{
		Argv: argv, Cwd: f.dir, TimeoutMS: 60_000,
		Env: map[string]string{
			"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME": os.Getenv("HOME"),
			"CANARY": f.canary, "TARGET": f.target, "SOCK": f.sock, "HOSTPID": fmt.Sprint(os.Getpid()),
			"SECRET":   f.secret,
			"ABSTRACT": filepath.Base(filepath.Dir(f.sock)) + "-dryexec-escape",
		},
	},
		Masks: []string{filepath.Dir(f.secret)},
	}
	if a.tune != nil {
		a.tune(&spec)
	}
	// The outer bound: whatever the trial does, the test gives up after this.
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	d, err := r.Trial(ctx, spec)
	if err != nil {
		t.Fatalf("trial: %v", err)
	}
	validate(t, d)
	out := d.Process.Stdout + d.Process.Stderr
	t.Logf("exit %d, violations %v, warnings %q\n%s", d.Process.ExitCode, d.Violations, d.Warnings, out)

	// (a) the host is unchanged.
	if got := snapshot(t, f.dir, filepath.Dir(f.target)); !maps(before, got) {
		t.Errorf("host changed:\nbefore %v\nafter  %v", before, got)
	}
	if n := lis.accepted(); n != 0 {
		t.Errorf("the host's unix socket accepted %d connections from the sandbox", n)
	}
	if got := readAll(a.watch); !maps(watched, got) {
		t.Errorf("watched host files changed:\nbefore %q\nafter  %q", watched, got)
	}
	for _, p := range a.absent {
		if _, err := os.Lstat(p); err == nil {
			os.RemoveAll(p)
			t.Errorf("%s appeared on the host", p)
		}
	}
	// (b) the attempt failed.
	if strings.Contains(out, "ESCAPED") || strings.Contains(out, secretText) {
		t.Errorf("the attempt reports it worked:\n%s", out)
	}
	// (c) the refusal is visible.
	// gvisor and vm: a kernel of the sandbox's own answers the command.
	ownKernel := r.Name() == gvisorName || r.Name() == vm.Name
	if why, ok := gvisorUnrecorded[a.name]; ok && ownKernel {
		t.Logf("not on record on %s: %s", r.Name(), why)
		return
	}
	if why, ok := vmUnrecorded[a.name]; ok && r.Name() == vm.Name {
		t.Logf("not on record on vm: %s", why)
		return
	}
	for _, r := range a.accept {
		if r.seen(d, f) {
			return
		}
	}
	if ownKernel && gvisorRefused(d) {
		return
	}
	t.Errorf("no record of the refusal; want one of %v\nviolations: %+v\nfiles: %+v\noutput:\n%s", a.accept, d.Violations, d.Files, out)
}

func (r record) seen(d *dryexec.StateDelta, f *fixture) bool {
	switch {
	case r.violation != "":
		return slices.ContainsFunc(d.Violations, func(v dryexec.Violation) bool {
			return v.Kind == r.violation && strings.Contains(v.Detail, r.detail)
		})
	case r.output != nil:
		return r.output.MatchString(d.Process.Stdout + d.Process.Stderr)
	case r.file != "":
		p := r.file
		if !filepath.IsAbs(p) {
			p = filepath.Join(f.dir, p)
		}
		return slices.ContainsFunc(d.Files, func(c dryexec.FileChange) bool { return c.Path == p })
	case r.warning != "":
		// As root the limits must hold as cgroups and report; only a
		// rootless caller may fall back (and be told so).
		return os.Getuid() != 0 && slices.ContainsFunc(d.Warnings, func(w string) bool { return strings.Contains(w, r.warning) })
	default:
		return r.timedOut && d.Process.TimedOut
	}
}

func validate(t *testing.T, d *dryexec.StateDelta) {
	t.Helper()
	v, err := schema.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(d)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Validate(b); err != nil {
		t.Fatalf("delta does not validate: %v\n%s", err, b)
	}
}

// snapshot maps every path under roots to its mode and content.
func snapshot(t *testing.T, roots ...string) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, root := range roots {
		err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
			if err != nil {
				return err
			}
			v := fi.Mode().String()
			if fi.Mode().IsRegular() {
				b, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				v += " " + string(b)
			}
			m[p] = v
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return m
}

func maps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// readAll maps each path to its content (or its read error).
func readAll(paths []string) map[string]string {
	m := map[string]string{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			m[p] = "error: " + err.Error()
			continue
		}
		m[p] = string(b)
	}
	return m
}

// unixListener is a host unix socket (and its abstract twin) that counts the
// connections it accepts: the sandbox must reach neither.
type unixListener struct {
	ls []net.Listener
	n  atomic.Int64
}

func listenUnix(t *testing.T, path string) *unixListener {
	t.Helper()
	u := &unixListener{}
	for _, addr := range []string{path, "@" + filepath.Base(filepath.Dir(path)) + "-dryexec-escape"} {
		l, err := net.Listen("unix", addr)
		if err != nil {
			t.Fatal(err)
		}
		u.ls = append(u.ls, l)
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				u.n.Add(1)
				c.Close()
			}
		}()
	}
	t.Cleanup(func() {
		for _, l := range u.ls {
			l.Close()
		}
	})
	return u
}

func (u *unixListener) accepted() int64 { return u.n.Load() }
