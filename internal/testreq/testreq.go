// Package testreq owns the tests' capability gate: the one place a test says
// what the machine must offer it (root, the ns rung, the gvisor rung, a TUN
// device, python3, a tool) and the one switch, DRYEXEC_REQUIRE, that turns a
// missing capability from a skip into a failure. Without the switch a suite run
// where capability detection misfires, or CI runs without root, would skip
// everything that matters and still pass.
//
// Each decision is also appended, one line per Need call, to the file named by
// DRYEXEC_TESTREQ_LOG when it is set, so that a CI run can print what ran and
// what was skipped per capability (see Summarize and ./summary). It is a test
// helper: only _test files and test helper packages import it, and it imports
// nothing of dryexec's (but testhooks, which imports nothing) so that any
// package's in-package tests can use it.
package testreq

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dryexec/dryexec/internal/testhooks"
)

// Env names the switch: a comma-separated list of capabilities (root,ns,…), or
// "all" (also "1", the older spelling) for every one. A capability in it that
// a test needs and the machine lacks fails the test instead of skipping it.
const Env = "DRYEXEC_REQUIRE"

// LogEnv names the file every Need call appends its decision to.
const LogEnv = "DRYEXEC_TESTREQ_LOG"

// Cap is a capability a test can need.
type Cap string

// The capabilities. Rungs are capabilities too, so the per-capability counts
// are also per-rung counts.
const (
	// Root is euid 0: mounts, cgroups, files owned by other users.
	Root Cap = "root"
	// NS is the ns rung (linuxns.Rung.Available).
	NS Cap = "ns"
	// Rootless is re-running tests as uid 65534: root, setpriv and the ns
	// rung for that user.
	Rootless Cap = "rootless"
	// Netsim is the simulated network: a TUN device this user can open.
	Netsim Cap = "netsim"
	// GVisor is the gvisor rung: a runsc of the pinned version that runs.
	GVisor Cap = "gvisor"
	// VM is the vm rung: QEMU, a kernel and a probe VM that boots (TCG
	// where KVM does not work).
	VM Cap = "vm"
	// Python is /usr/bin/python3, which exec_python and many attempts run.
	Python Cap = "python"
	// Tool is a program `make deps` installs (git, make, bwrap, …).
	Tool Cap = "tool"
	// Kernel is a kernel, filesystem or host feature that varies between hosts
	// (overlayfs options, user xattrs on tmpfs, a Landlock ABI, the i386 ABI,
	// a cgroup v1 hierarchy, a pseudo-terminal, a non-loopback address). CI
	// does not require it by default: whether it is there depends on the
	// kernel and the host, not on `make deps`.
	Kernel Cap = "kernel"
	// TestHooks is a build with the test hooks compiled in (package
	// testhooks: crash points, injected delays), which release builds lack.
	TestHooks Cap = "testhooks"
)

// All is every capability, in the order the summary prints them.
var All = []Cap{Root, NS, Rootless, Netsim, GVisor, VM, Python, Tool, Kernel, TestHooks}

// Required reports whether the switch requires c.
func Required(c Cap) bool { return required(os.Getenv(Env), c) }

func required(sw string, c Cap) bool {
	for _, f := range strings.Split(sw, ",") {
		switch f = strings.TrimSpace(f); f {
		case "all", "1":
			return true
		case string(c):
			return true
		}
	}
	return false
}

// Need gates t on c: with unavailable nil the test runs; otherwise it is
// skipped, or failed where the switch requires c. Either way the decision is
// logged (LogEnv).
func Need(t testing.TB, c Cap, unavailable error) {
	t.Helper()
	needf(t, c, "", unavailable)
}

// Needf is Need with a detail naming what of c (the tool, the feature).
func Needf(t testing.TB, c Cap, what string, unavailable error) {
	t.Helper()
	needf(t, c, what, unavailable)
}

func needf(t testing.TB, c Cap, what string, unavailable error) {
	t.Helper()
	status := statusRan
	switch {
	case unavailable == nil:
	case Required(c):
		status = statusFailed
	default:
		status = statusSkipped
	}
	record(t, c, what, status, unavailable)
	label := string(c)
	if what != "" {
		label += " (" + what + ")"
	}
	switch status {
	case statusFailed:
		t.Fatalf("%s is required here (%s=%s) but unavailable: %v", label, Env, os.Getenv(Env), unavailable)
	case statusSkipped:
		t.Skipf("%s unavailable here: %v", label, unavailable)
	}
}

// ErrNotRoot is the reason Root gives.
var ErrNotRoot = errors.New("not root (euid is not 0)")

// NeedRoot gates t on euid 0.
func NeedRoot(t testing.TB) {
	t.Helper()
	var err error
	if os.Geteuid() != 0 {
		err = ErrNotRoot
	}
	needf(t, Root, "", err)
}

// NeedTool gates t on a program on PATH and returns its path. python3 counts
// as Python, everything else as Tool.
func NeedTool(t testing.TB, name string) string {
	t.Helper()
	p, err := exec.LookPath(name)
	c := Tool
	if strings.HasPrefix(name, "python") {
		c = Python
	}
	needf(t, c, name, err)
	return p
}

// Python3 is the interpreter the tests run python with.
const Python3 = "/usr/bin/python3"

// NeedPython gates t on /usr/bin/python3 (the path trials run) and returns it.
func NeedPython(t testing.TB) string {
	t.Helper()
	_, err := os.Stat(Python3)
	needf(t, Python, "", err)
	return Python3
}

const (
	statusRan     = "ran"
	statusSkipped = "skipped"
	statusFailed  = "failed"
)

// record appends "cap<TAB>status<TAB>package dir<TAB>test<TAB>what<TAB>reason".
// A failure to log is the test's failure: a CI run whose counts are missing
// would claim less than it ran.
func record(t testing.TB, c Cap, what, status string, why error) {
	t.Helper()
	p := os.Getenv(LogEnv)
	if p == "" {
		return
	}
	dir := pkgDir()
	reason := ""
	if why != nil {
		reason = strings.Join(strings.Fields(why.Error()), " ")
	}
	line := strings.Join([]string{string(c), status, dir, t.Name(), what, reason}, "\t") + "\n"
	// One write with O_APPEND: lines from parallel test binaries do not
	// interleave (each is far below PIPE_BUF).
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o666)
	if err == nil {
		_, err = f.WriteString(line)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.Fatalf("%s: %v", LogEnv, err)
	}
}

// pkgDir is the test's package directory (go test runs a test binary there)
// relative to the module root, "." for the root package.
func pkgDir() string {
	wd, err := os.Getwd()
	if err != nil {
		return "?"
	}
	for d := wd; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "go.mod")); err == nil {
			if rel, err := filepath.Rel(d, wd); err == nil {
				return filepath.ToSlash(rel)
			}
			break
		}
		if filepath.Dir(d) == d {
			break
		}
	}
	return filepath.ToSlash(wd)
}

// NeedRootless gates t on re-running something as uid 65534: root to switch
// users and setpriv (util-linux) to do it. It returns setpriv's path.
func NeedRootless(t testing.TB) string {
	t.Helper()
	setpriv, err := exec.LookPath("setpriv")
	if os.Geteuid() != 0 {
		err = errors.New("needs root to switch to an unprivileged user")
	}
	needf(t, Rootless, "", err)
	return setpriv
}

// NeedTestHooks gates t on a build with the test hooks (testhooks.Tag).
func NeedTestHooks(t testing.TB) {
	t.Helper()
	needf(t, TestHooks, "", testhooks.Missing())
}
