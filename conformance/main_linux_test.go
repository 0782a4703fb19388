package conformance

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dryexec/dryexec/guest"
	"github.com/dryexec/dryexec/internal/guestexe"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/netsim/netrole"
	"github.com/dryexec/dryexec/rung"
	"github.com/dryexec/dryexec/session"
	"github.com/dryexec/dryexec/wire"
)

// rungEnv restricts the suite to one rung ("host" or "ns").
const rungEnv = "DRYEXEC_CONFORMANCE_RUNG"

// vmEnv runs the suite on the vm rung too: a VM boot per session, seconds
// each under TCG (`make test-vm` sets it).
const vmEnv = "DRYEXEC_TEST_VM"

// TestMain lets this test binary serve as the guest: sessions start it again as
// `dryexec guest session`.
func TestMain(m *testing.M) {
	guest.MaybeMain(os.Args)
	netrole.MaybeMain(os.Args)
	// Modes of new files are part of what a diff reports: make them the same
	// for every run (the guest and the commands inherit this).
	syscall.Umask(0o022)
	os.Exit(runMain(m))
}

// runMain runs the tests. On the vm rung the guest is the VM's /init too,
// which must be static, and this test binary may not be: a static guest is
// built first and named for every rung of the run (it is the same guest,
// the one `make build` ships).
func runMain(m *testing.M) int {
	if r := os.Getenv(rungEnv); os.Getenv(vmEnv) == "" || os.Getenv(guestexe.Env) != "" || (r != "" && r != "vm") {
		return m.Run()
	}
	dir, err := os.MkdirTemp("", "dryexec-conformance-guest-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	exe := filepath.Join(dir, guestexe.Name)
	build := exec.Command("go", "build", "-o", exe, "github.com/dryexec/dryexec/cmd/dryexec-guest")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building the static guest for the vm rung: %v\n%s", err, out)
		return 1
	}
	os.Setenv(guestexe.Env, exe)
	return m.Run()
}

// conformanceCase is one behaviour, run once per rung.
type conformanceCase struct {
	name string
	run  func(t *testing.T, open opener)
}

// opener starts a session on the rung under test; it is closed when t ends.
type opener = func(t *testing.T, opt session.Options) *session.Session

// TestConformance runs every case on every available rung:
// TestConformance/GROUP/CASE/RUNG.
func TestConformance(t *testing.T) {
	groups := []struct {
		name  string
		cases []conformanceCase
	}{
		{"ping", pingCases},
		{"shell", shellCases},
		{"diff", diffCases},
		{"push_tree", pushCases},
		{"isolation", isolationCases},
		{"lifecycle", lifecycleCases},
		{"concurrency", concurrencyCases},
		{"python", pythonCases},
		{"cache", cacheCases},
		{"host_objects", hostObjectCases},
		{"environment", environmentCases},
		{"values", valueCases},
		{"fork", forkCases},
	}
	seen := map[string]bool{}
	for _, g := range groups {
		t.Run(g.name, func(t *testing.T) {
			for _, c := range g.cases {
				if seen[g.name+"/"+c.name] {
					t.Fatalf("duplicate case %s/%s", g.name, c.name)
				}
				seen[g.name+"/"+c.name] = true
				t.Run(c.name, func(t *testing.T) { forEachRung(t, g.name+"/"+c.name, c.run) })
			}
		})
	}
}

// rungs are the rungs this run covers, in order: every rung of the ladder
// (each case skips, with the reason, one that cannot hold a session here),
// or the one DRYEXEC_CONFORMANCE_RUNG names.
func rungs(t *testing.T) []string {
	r := os.Getenv(rungEnv)
	switch {
	case r == "":
		return rung.Names()
	case slices.Contains(rung.Names(), r):
		return []string{r}
	}
	t.Fatalf("%s=%q: want one of %v", rungEnv, r, rung.Names())
	return nil
}

// sessionRungs says, once per run, why each rung cannot hold a session
// here (nil: it can).
var sessionRungs = sync.OnceValue(func() map[string]error {
	m := map[string]error{}
	for _, n := range rung.Names() {
		m[n] = session.CheckRung(context.Background(), n)
	}
	return m
})

// forEachRung runs fn as a subtest per rung; a rung that cannot hold a
// session here (not built, unavailable, no sessions yet) is skipped with
// the reason.
func forEachRung(t *testing.T, name string, fn func(t *testing.T, open opener)) {
	for _, r := range rungs(t) {
		t.Run(r, func(t *testing.T) {
			if why := unobservable[r][name]; why != "" {
				t.Skipf("not observable on %s: %s", r, why)
			}
			err := sessionRungs()[r]
			switch {
			case r == "ns":
				// ns sessions are a capability CI requires: a missing one fails there.
				testreq.Need(t, testreq.NS, err)
			case r == "gvisor":
				// So are gvisor's, where CI requires gvisor (DRYEXEC_REQUIRE).
				testreq.Need(t, testreq.GVisor, err)
			case r == "vm" && os.Getenv(vmEnv) == "":
				// A VM boot per session: minutes for the corpus under TCG.
				t.Skipf("set %s=1 (make test-vm) to run the corpus on vm", vmEnv)
			case r == "vm":
				testreq.Need(t, testreq.VM, err)
			case err != nil:
				t.Skipf("no %s sessions here: %v", r, err)
			}
			fn(t, func(t *testing.T, opt session.Options) *session.Session {
				t.Helper()
				opt.Rung = r
				s, err := session.Open(ctx(t), opt)
				if err != nil {
					t.Fatalf("opening a %s session: %v", r, err)
				}
				t.Cleanup(func() { s.Close() })
				return s
			})
		})
	}
}

// unobservable are the cases, per rung, whose check cannot be made there,
// and why. Most find the command's processes in the host's /proc by their
// command line, and on gvisor a command's processes are gVisor's, not the
// host's (the host sees runsc's sentry and stub processes only). What they check
// holds there by construction: every process of a gvisor sandbox ends with
// it (its cgroup is removed with it), and lifecycle/guest_sigkill_is_session_lost
// and no_guest_process_after_close, which find the guest (runsc on gvisor),
// run. docs/architecture.md ("The gvisor rung", Sessions) lists them.
var unobservable = map[string]map[string]string{
	"gvisor": {
		"lifecycle/guest_sigkill_during_exec": gvisorProcs,
		"lifecycle/close_during_exec":         gvisorProcs,
		"concurrency/calls_during_exec":       gvisorProcs,
		"python/close_ends_a_running_exec":    gvisorProcs,
		"isolation/ns_process_isolation": "the case lists the sandbox's network interfaces in /sys/class/net, " +
			"which gVisor's sysfs does not have",
	},
	// vm: the same cases find the command's processes in the host's /proc,
	// and a VM's processes are its kernel's. rung/vm's
	// TestSessionQEMUKilledMidExec kills QEMU mid-exec instead, marked by an
	// emit, not by a host process.
	"vm": {
		"lifecycle/guest_sigkill_during_exec": vmProcs,
		"lifecycle/close_during_exec":         vmProcs,
		"concurrency/calls_during_exec":       vmProcs,
		"python/close_ends_a_running_exec":    vmProcs,
	},
}

const (
	gvisorProcs = "the case waits for the command's processes in the host's /proc, and gVisor's processes are not the host's"
	vmProcs     = "the case waits for the command's processes in the host's /proc, and a VM's processes are its own kernel's"
)

// openDefault opens a session with default options.
func openDefault(t *testing.T, open opener) *session.Session {
	t.Helper()
	return open(t, session.Options{})
}

// ctx bounds every call a case makes, so a hung guest fails the case instead
// of the whole run.
func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

const shellTimeout = 60 * time.Second

// sh runs command and fails the test if the call itself fails.
func sh(t *testing.T, s *session.Session, command string) *wire.ShellResult {
	t.Helper()
	r, err := s.Shell(ctx(t), command, shellTimeout)
	if err != nil {
		t.Fatalf("Shell(%q): %v", command, err)
	}
	if r.TimedOut {
		t.Fatalf("Shell(%q) timed out:\n%s", command, r.Transcript)
	}
	return r
}

// run runs command, requires exit 0, and returns its stdout.
func run(t *testing.T, s *session.Session, command string) string {
	t.Helper()
	r := sh(t, s, command)
	if r.ExitCode != 0 {
		t.Fatalf("Shell(%q): exit %d, want 0\n%s", command, r.ExitCode, r.Transcript)
	}
	return r.Stdout
}

// wantOut runs command and requires exit 0 and exactly stdout.
func wantOut(t *testing.T, s *session.Session, command, stdout string) {
	t.Helper()
	if got := run(t, s, command); got != stdout {
		t.Fatalf("Shell(%q): stdout %q, want %q", command, got, stdout)
	}
}

func rungOf(s *session.Session) string { return s.Info().Rung }

// ---- trees ----

// node is one entry of a test tree: a file (data, mode), a symlink (link) or
// a directory (dir).
type node struct {
	data string
	mode fs.FileMode
	link string
	dir  bool
}

func file(data string) node                    { return node{data: data, mode: 0o644} }
func fileMode(data string, m fs.FileMode) node { return node{data: data, mode: m} }
func symlink(target string) node               { return node{link: target} }
func dirMode(m fs.FileMode) node               { return node{dir: true, mode: m} }

type tree map[string]node

// write creates the tree under root (parents first).
func (tr tree) write(t *testing.T, root string) {
	t.Helper()
	for _, p := range slices.Sorted(maps.Keys(tr)) {
		n, full := tr[p], filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		var err error
		switch {
		case n.dir:
			if err = os.MkdirAll(full, 0o755); err == nil {
				err = os.Chmod(full, n.mode)
			}
		case n.link != "":
			err = os.Symlink(n.link, full)
		default:
			if err = os.WriteFile(full, []byte(n.data), 0o600); err == nil {
				err = os.Chmod(full, n.mode)
			}
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

// seed makes tr the session's workspace and baseline (through PushDir).
func seed(t *testing.T, s *session.Session, tr tree) {
	t.Helper()
	dir := t.TempDir()
	tr.write(t, dir)
	if err := s.PushDir(ctx(t), dir); err != nil {
		t.Fatalf("PushDir: %v", err)
	}
}

// tarEntry is one header of a hand-made tar stream.
type tarEntry struct {
	name, link string
	typ        byte
	data       string
	mode       int64
}

func makeTar(t *testing.T, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Name: e.name, Linkname: e.link, Typeflag: e.typ, Mode: e.mode, Size: int64(len(e.data)), ModTime: time.Unix(1700000000, 0)}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Typeflag != tar.TypeReg {
			h.Size = 0
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if h.Typeflag == tar.TypeReg {
			if _, err := tw.Write([]byte(e.data)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// ---- diffs ----

// want is an expected diff. Writes and links not named in modes are expected
// with mode 0644 and 0777.
type want struct {
	writes  map[string]string
	links   map[string]string
	deletes []string
	modes   map[string]fs.FileMode
}

func getDiff(t *testing.T, s *session.Session, rebase bool) *session.Diff {
	t.Helper()
	d, err := s.Diff(ctx(t), rebase)
	if err != nil {
		t.Fatalf("Diff(rebase=%v): %v", rebase, err)
	}
	return d
}

// checkDiff compares a diff with what is expected, exactly.
func checkDiff(t *testing.T, d *session.Diff, w want) {
	t.Helper()
	modes := map[string]fs.FileMode{}
	for p := range w.writes {
		modes[p] = 0o644
	}
	for p := range w.links {
		modes[p] = 0o777
	}
	maps.Copy(modes, w.modes)
	var errs []string
	gotW := map[string]string{}
	for p, b := range d.Writes {
		gotW[p] = string(b)
	}
	for _, p := range union(gotW, w.writes) {
		g, gok := gotW[p]
		e, eok := w.writes[p]
		switch {
		case !gok:
			errs = append(errs, fmt.Sprintf("write %s missing", p))
		case !eok:
			errs = append(errs, fmt.Sprintf("unexpected write %s (%s)", p, show(g)))
		case g != e:
			errs = append(errs, fmt.Sprintf("write %s: %s, want %s", p, show(g), show(e)))
		}
	}
	if !equalMaps(d.Links, w.links) {
		errs = append(errs, fmt.Sprintf("links %v, want %v", d.Links, w.links))
	}
	gotD := slices.Clone(d.Deletes)
	slices.Sort(gotD)
	wantD := slices.Clone(w.deletes)
	slices.Sort(wantD)
	if !slices.Equal(gotD, wantD) {
		errs = append(errs, fmt.Sprintf("deletes %q, want %q", gotD, wantD))
	}
	if !equalMaps(d.Modes, modes) {
		errs = append(errs, fmt.Sprintf("modes %s, want %s", showModes(d.Modes), showModes(modes)))
	}
	if wantEmpty := len(w.writes)+len(w.links)+len(w.deletes)+len(w.modes) == 0; d.Empty() != wantEmpty {
		errs = append(errs, fmt.Sprintf("Empty() %v, want %v", d.Empty(), wantEmpty))
	}
	if len(errs) > 0 {
		t.Fatalf("diff is not as expected:\n  %s", strings.Join(errs, "\n  "))
	}
}

// checkEmpty requires a diff with no change at all.
func checkEmpty(t *testing.T, d *session.Diff) {
	t.Helper()
	checkDiff(t, d, want{})
}

func union[V any](a, b map[string]V) []string {
	m := map[string]bool{}
	for k := range a {
		m[k] = true
	}
	for k := range b {
		m[k] = true
	}
	return slices.Sorted(maps.Keys(m))
}

func equalMaps[V comparable](a, b map[string]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func show(s string) string {
	if len(s) <= 64 {
		return strconv.Quote(s)
	}
	return fmt.Sprintf("%d bytes %q…", len(s), s[:32])
}

func showModes(m map[string]fs.FileMode) string {
	var parts []string
	for _, p := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s:%#o", p, uint32(m[p])))
	}
	return "{" + strings.Join(parts, " ") + "}"
}

// ---- processes and mounts ----

// isGuest says whether argv is a session guest's host process: the guest
// itself (`dryexec guest session`: ns, host), on gvisor runsc running
// a session's container (`… run --bundle … dryexec-se_…`), on vm QEMU
// booting a session's VM (its kernel's command line ends with the init's
// argv, `guest vm-init session`): the session guest there is a process of
// gVisor's or of the VM's kernel, and runsc or QEMU is the host process that
// holds it, whose death ends it.
func isGuest(argv []string) bool {
	if strings.Join(argv, " ") == "dryexec guest session" {
		return true
	}
	n := len(argv)
	if n >= 2 && strings.HasPrefix(filepath.Base(argv[0]), "qemu-system") {
		i := slices.Index(argv, "-append")
		return i >= 0 && i+1 < n && strings.HasSuffix(argv[i+1], " "+wire.RoleVMInit+" "+wire.RoleSession)
	}
	return n >= 4 && filepath.Base(argv[0]) == "runsc" && (slices.Contains(argv, "run") || slices.Contains(argv, "restore")) &&
		strings.HasPrefix(argv[n-1], "dryexec-se_")
}

// guestPIDs lists this process's children that are session guests.
func guestPIDs(t *testing.T) []int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid(pid) != os.Getpid() {
			continue
		}
		cl, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		if isGuest(strings.Split(strings.TrimRight(string(cl), "\x00"), "\x00")) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// ppid is pid's parent, or -1 if it is gone.
func ppid(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "PPid:"); ok {
			n, _ := strconv.Atoi(strings.TrimSpace(v))
			return n
		}
	}
	return -1
}

// mountSnapshot is this process's mount table, one "mountpoint fstype source"
// per mount.
func mountSnapshot(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		i := slices.Index(f, "-")
		if len(f) < 5 || i < 0 || i+2 >= len(f) {
			continue
		}
		m[f[4]+" "+f[i+1]+" "+f[i+2]] = true
	}
	return m
}

// sessionMounts lists mounts in after but not before that a session guest
// would have made had its mounts leaked into ours: anything stacked on a path
// that was already a mount point (the guest overlays every host mount), under
// /proc, /sys or /dev, or at a workspace. (Other tests on the machine mount
// things at fresh temp dirs; this keeps the check about sessions.)
func sessionMounts(before, after map[string]bool, ws string) []string {
	mps := map[string]bool{}
	for m := range before {
		mps[strings.Fields(m)[0]] = true
	}
	under := func(p, dir string) bool { return p == dir || strings.HasPrefix(p, dir+"/") }
	var out []string
	for m := range after {
		if before[m] {
			continue
		}
		mp := strings.Fields(m)[0]
		if mps[mp] || under(mp, "/proc") || under(mp, "/sys") || under(mp, "/dev") || under(mp, "/workspace") || (ws != "" && under(mp, ws)) {
			out = append(out, m)
		}
	}
	slices.Sort(out)
	return out
}

// hostFile is a file the sandbox can see, made before the session starts (the
// ns rung overlays the host's filesystems as they are at start).
func hostFile(t *testing.T, data []byte) string {
	t.Helper()
	dir := t.TempDir()
	p := filepath.Join(dir, "data")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// quote makes s one single-quoted shell word.
func quote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
