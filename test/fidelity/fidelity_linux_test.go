package fidelity

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/guest"
	"github.com/dryexec/dryexec/internal/guestexe"
	"github.com/dryexec/dryexec/internal/rootless"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/netsim/netrole"
	gvisorrung "github.com/dryexec/dryexec/rung/gvisor"
	"github.com/dryexec/dryexec/rung/linuxns"
	vmrung "github.com/dryexec/dryexec/rung/vm"
)

// The harness's environment variables.
const (
	// tableEnv names the Markdown file the results table goes to (make
	// fidelity: bench/results/fidelity.md).
	tableEnv = "DRYEXEC_FIDELITY_TABLE"
	// calibrateEnv=1 runs every workload natively twice instead of as a
	// trial, and reports what differs between two native runs: the
	// nondeterminism the ignore table must cover.
	calibrateEnv = "DRYEXEC_FIDELITY_CALIBRATE"
	// Handed from the root run to its rootless re-run.
	binEnv     = "DRYEXEC_FIDELITY_BIN"
	goCacheEnv = "DRYEXEC_FIDELITY_GOCACHE"
	rowsEnv    = "DRYEXEC_FIDELITY_ROWS"
	// vmEnv=1 adds the vm mode (make test-vm): a VM boot per trial, seconds
	// each under TCG, so not part of make fidelity.
	vmEnv = "DRYEXEC_TEST_VM"
	// hostEnv=1 adds the host mode (the rung without isolation).
	hostEnv = "DRYEXEC_FIDELITY_HOST"
)

// TestMain lets this test binary serve as the guest, should anything in it
// start a trial in-process (rootless.Rerun probes the rung).
func TestMain(m *testing.M) {
	guest.MaybeMain(os.Args)
	netrole.MaybeMain(os.Args)
	os.Exit(m.Run())
}

// row is one workload's result in one mode, for the table.
type row struct {
	Workload string   `json:"workload"`
	Mode     string   `json:"mode"`
	NativeS  float64  `json:"native_s"`
	TrialS   float64  `json:"trial_s"`
	CommitS  float64  `json:"commit_s"`
	Verdict  string   `json:"verdict"`
	Diffs    []string `json:"diffs,omitempty"`
	Known    string   `json:"known,omitempty"`
	// Run says when, at which commit and under what load the row was
	// measured: a table merges rows of separate runs (the vm mode runs
	// apart, in make test-vm).
	Run string `json:"run,omitempty"`
	// Load is the load average when the row's workload ended.
	Load string `json:"load,omitempty"`
}

func TestFidelity(t *testing.T) {
	testreq.Need(t, testreq.NS, (&linuxns.Rung{}).Available(t.Context()))
	h := newHarness(t)
	rows := h.all(t)
	if rootless.Active() {
		if p := os.Getenv(rowsEnv); p != "" {
			writeRows(t, p, rows)
		}
		return
	}
	t.Run("rootless", func(t *testing.T) { rows = append(rows, h.rootless(t)...) })
	t.Run("gvisor", func(t *testing.T) { rows = append(rows, h.gvisor(t)...) })
	t.Run("vm", func(t *testing.T) { rows = append(rows, h.vm(t)...) })
	t.Run("host", func(t *testing.T) { rows = append(rows, h.host(t)...) })
	if p := os.Getenv(tableEnv); p != "" {
		if err := writeTable(p, rows, h.calibrate); err != nil {
			t.Error(err)
		}
		t.Logf("table written to %s", p)
	}
}

// harness is what every workload of one mode shares.
type harness struct {
	base      string // this process's temp dir: trees, templates, the store
	bin       string // the dryexec CLI, dryexec-guest beside it
	mode      string // root, rootless or gvisor
	rung      string // the rung trials run on: ns or gvisor
	runsc     string // for gvisor: the runsc the CLI runs (workloads' PATH lacks GOPATH/bin)
	path      string // PATH of every workload
	run       string // when, at which commit: row.Run
	calibrate bool
	goCache   func() (string, error) // a warm GOCACHE for go_build's template
	// trialScale multiplies a workload's timeout for its trial (vm: the
	// command runs under TCG); 0 is 1.
	trialScale time.Duration
}

func newHarness(t *testing.T) *harness {
	h := &harness{mode: "root", rung: "ns", calibrate: os.Getenv(calibrateEnv) == "1"}
	if os.Getuid() != 0 {
		h.mode = "rootless"
	}
	base, err := os.MkdirTemp("", "dryexec-fidelity-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { removeTree(base) })
	// The rootless re-run reads the binaries and the Go cache from here.
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	h.base = base
	rev, _ := exec.Command("git", "rev-parse", "--short", "HEAD").Output()
	h.run = fmt.Sprintf("%s, commit %s", time.Now().UTC().Format("2006-01-02 15:04 UTC"), strings.TrimSpace(string(rev)))
	h.path = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	goTool, goErr := exec.LookPath("go")
	if goErr == nil {
		h.path = filepath.Dir(goTool) + ":" + h.path
	}
	h.goCache = h.warmGoCache(goTool)
	// Wait for it before the workloads start, and before base is removed.
	t.Cleanup(func() { h.goCache() })
	defer h.goCache()
	if h.bin = os.Getenv(binEnv); h.bin == "" {
		if goErr != nil {
			t.Fatalf("no go tool to build the dryexec CLI with: %v", goErr)
		}
		h.bin = filepath.Join(base, "bin", "dryexec")
		for _, b := range [][2]string{{h.bin, "../../cmd/dryexec"}, {filepath.Join(base, "bin", "dryexec-guest"), "../../cmd/dryexec-guest"}} {
			cmd := exec.Command(goTool, "build", "-o", b[0], b[1])
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Fatalf("building %s: %v\n%s", b[1], err, out)
			}
		}
	}
	return h
}

// warmGoCache builds goMain once with a fresh GOCACHE, so that go_build's
// template can start from a warm cache (a cold one compiles the runtime:
// 20-40 s here, in each of the four runs). It runs beside the CLI's build,
// and before any workload, whose timings it would otherwise skew.
func (h *harness) warmGoCache(goTool string) (wait func() (string, error)) {
	if dir := os.Getenv(goCacheEnv); dir != "" {
		return func() (string, error) { return dir, nil }
	}
	if goTool == "" {
		return func() (string, error) { return "", errors.New("no go tool") }
	}
	dir, src, tree := filepath.Join(h.base, "gocache"), filepath.Join(h.base, "gowarm"), filepath.Join(h.base, "gowarm-tree")
	done := make(chan struct{})
	var err error
	go func() {
		defer close(done)
		for _, d := range []string{src, tree + "/home", tree + "/tmp"} {
			if err = os.MkdirAll(d, 0o755); err != nil {
				return
			}
		}
		if err = os.WriteFile(filepath.Join(src, "go.mod"), []byte("module example.com/hello\n\ngo 1.22\n"), 0o644); err != nil {
			return
		}
		if err = os.WriteFile(filepath.Join(src, "main.go"), []byte(goMain), 0o644); err != nil {
			return
		}
		cmd := exec.Command(goTool, "build", "-o", "app", ".")
		cmd.Dir = src
		cmd.Env = append(h.env(tree), "GOCACHE="+dir)
		if out, e := cmd.CombinedOutput(); e != nil {
			err = fmt.Errorf("warming a Go build cache: %v\n%s", e, out)
		}
	}()
	return func() (string, error) { <-done; return dir, err }
}

// env is every workload's environment in the tree root: fixed identities and
// dates for git, offline package managers, HOME and TMPDIR in the tree.
func (h *harness) env(root string) []string {
	return []string{
		"PATH=" + h.path, "HOME=" + root + "/home", "TMPDIR=" + root + "/tmp", "PWD=" + root + "/work",
		"LANG=C.UTF-8", "TZ=UTC",
		"GIT_AUTHOR_NAME=Fidelity", "GIT_AUTHOR_EMAIL=fidelity@example.invalid", "GIT_AUTHOR_DATE=2026-01-02T03:04:05Z",
		"GIT_COMMITTER_NAME=Fidelity", "GIT_COMMITTER_EMAIL=fidelity@example.invalid", "GIT_COMMITTER_DATE=2026-01-02T03:04:05Z",
		"GIT_CONFIG_NOSYSTEM=1",
		"PIP_DISABLE_PIP_VERSION_CHECK=1", "PIP_NO_INDEX=1", "PIP_NO_INPUT=1",
		"npm_config_update_notifier=false", "npm_config_audit=false", "npm_config_fund=false", "npm_config_offline=true",
		"GOFLAGS=-mod=mod", "GOPROXY=off", "GOSUMDB=off", "GOTOOLCHAIN=local",
	}
}

// workload runs w natively and as a trial in identical trees, compares, and
// fills r.
func (h *harness) workload(t *testing.T, w workload, r *row) {
	for _, tool := range w.tools {
		if !h.hasTool(tool) {
			r.Verdict = "missing tool " + tool
			testreq.Needf(t, testreq.Tool, tool, fmt.Errorf("%s needs %s, which is not installed (make deps installs it)", w.name, tool))
		}
	}
	r.Verdict = "harness error"
	timeout := w.timeout
	if timeout == 0 {
		timeout = 3 * time.Minute
	}
	root, tmpl := filepath.Join(h.base, "w", w.name), filepath.Join(h.base, "t", w.name)
	env := h.env(root)
	if w.name == "go_build" {
		dir, err := h.goCache()
		if err != nil {
			t.Fatal(err)
		}
		env = append(env, "FIDELITY_GOCACHE="+dir)
	}
	rules := rulesFor(w.name)

	// The template: made once, natively; both runs start from a copy.
	for _, d := range []string{"work", "home", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if w.setup != "" {
		if res := h.native(t.Context(), root, env, w.setup, timeout); res.code != 0 || res.err != nil {
			t.Fatalf("setup failed (%d, %v):\n%s%s", res.code, res.err, res.stdout, res.stderr)
		}
	}
	if err := os.MkdirAll(filepath.Dir(tmpl), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(root, tmpl); err != nil {
		t.Fatal(err)
	}
	defer removeTree(tmpl)

	// The native run.
	before := h.copyTemplate(t, tmpl, root)
	stamp := h.startAfter(t, before, w.nextSecond)
	nat := h.native(t.Context(), root, env, w.run, timeout)
	if nat.err != nil {
		t.Fatalf("native run: %v", nat.err)
	}
	nat.win.start = stamp
	r.NativeS = nat.dur.Seconds()
	native := mustScan(t, root)
	var nCheck result
	if w.check != "" {
		nCheck = h.native(t.Context(), root, env, w.check, timeout)
	}
	t.Logf("native: exit %d in %.2f s\n%s%s", nat.code, r.NativeS, nat.stdout, nat.stderr)
	removeTree(root)

	c := &comparison{rules: rules, before: before, native: native, nWin: nat.win}
	var diffs []diff
	if h.calibrate {
		// A second native run stands for the trial: whatever differs is
		// nondeterminism the rules must cover.
		again := h.copyTemplate(t, tmpl, root)
		if d := identical(before, again); len(d) > 0 {
			t.Fatalf("the two copies of the template differ: %v", d)
		}
		stamp := h.startAfter(t, again, w.nextSecond)
		nat2 := h.native(t.Context(), root, env, w.run, timeout)
		r.TrialS = nat2.dur.Seconds()
		c.tWin = window{stamp, nat2.win.end}
		diffs = append(diffs, output(rules, "command", nat.code, nat.stdout, nat.stderr, nat2.code, nat2.stdout, nat2.stderr)...)
		diffs = append(diffs, c.trees(mustScan(t, root))...)
		diffs = append(diffs, h.check(t, w, root, env, timeout, rules, nCheck)...)
		removeTree(root)
		h.verdict(t, r, diffs, false)
		return
	}

	// The trial, in a fresh copy at the same path.
	again := h.copyTemplate(t, tmpl, root)
	defer removeTree(root)
	if d := identical(before, again); len(d) > 0 {
		t.Fatalf("the two copies of the template differ: %v", d)
	}
	stamp = h.startAfter(t, again, w.nextSecond)
	d, twin, err := h.trial(t.Context(), root, env, w.run, timeout*max(h.trialScale, 1))
	if err != nil {
		t.Fatalf("trial: %v", err)
	}
	r.TrialS = twin.seconds()
	c.tWin = window{stamp, twin.end}
	t.Logf("trial %s: exit %d in %.2f s, %d changes, %d touched, decision %s\n%s%s", d.TrialID, d.Process.ExitCode, r.TrialS,
		len(d.Files), len(d.Touched), d.Decision.Choice, d.Process.Stdout, d.Process.Stderr)
	for _, d := range identical(again, mustScan(t, root)) {
		diffs = append(diffs, diff{"trial changed the host", d.path, d.detail})
	}
	diffs = append(diffs, output(rules, "command", nat.code, nat.stdout, nat.stderr,
		d.Process.ExitCode, d.Process.Stdout, d.Process.Stderr)...)
	diffs = append(diffs, c.delta(d, root)...)

	// The commit, then the committed tree against the native one.
	// A trial that changed nothing in the tree has nothing to commit (and
	// commit says so with an error).
	inTree := func(f dryexec.FileChange) bool { return strings.HasPrefix(f.Path, root+"/") }
	if slices.ContainsFunc(d.Files, inTree) || slices.ContainsFunc(d.Touched, inTree) {
		start := time.Now()
		if out, err := h.cli(t.Context(), env, "commit", d.TrialID, root); err != nil {
			diffs = append(diffs, diff{"commit failed", "", commitError(out)})
		}
		r.CommitS = time.Since(start).Seconds()
	}
	diffs = append(diffs, c.trees(mustScan(t, root))...)
	diffs = append(diffs, h.check(t, w, root, env, timeout, rules, nCheck)...)
	h.verdict(t, r, diffs, true)
}

// commitError is the CLI's error without its note about the decision.
func commitError(out string) string {
	var keep []string
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasPrefix(l, "dryexec: note:") {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, " ")
}

// check runs w.check in the tree at root and compares it with the native one.
func (h *harness) check(t *testing.T, w workload, root string, env []string, timeout time.Duration, rules []ignoreRule, nCheck result) []diff {
	if w.check == "" {
		return nil
	}
	res := h.native(t.Context(), root, env, w.check, timeout)
	t.Logf("check: exit %d natively, %d after\n%s%s", nCheck.code, res.code, res.stdout, res.stderr)
	return output(rules, "check", nCheck.code, nCheck.stdout, nCheck.stderr, res.code, res.stdout, res.stderr)
}

// verdict fills r from diffs and fails t unless the workload is known to
// differ (and still does).
func (h *harness) verdict(t *testing.T, r *row, diffs []diff, enforce bool) {
	for _, d := range diffs {
		r.Diffs = append(r.Diffs, d.String())
	}
	k, isKnown := known(r.Workload, r.Mode)
	if isKnown {
		r.Known = k.cause
	}
	if len(diffs) == 0 {
		r.Verdict = "exact"
		if isKnown && enforce {
			t.Errorf("%s (%s) matched exactly but is listed in knownDiffering (%s): remove it from the table", r.Workload, r.Mode, k.cause)
		}
		return
	}
	r.Verdict = "differs: " + summarize(diffs)
	msg := fmt.Sprintf("%s (%s) %s:\n  %s", r.Workload, r.Mode, r.Verdict, strings.Join(r.Diffs, "\n  "))
	switch {
	case !enforce:
		t.Log(msg)
	case isKnown:
		t.Logf("%s\nknown to differ: %s", msg, k.cause)
	default:
		t.Error(msg)
	}
}

// summarize counts diffs by class, in the order the classes first appear.
func summarize(diffs []diff) string {
	var classes []string
	n := map[string]int{}
	for _, d := range diffs {
		if n[d.class] == 0 {
			classes = append(classes, d.class)
		}
		n[d.class]++
	}
	parts := make([]string, len(classes))
	for i, c := range classes {
		parts[i] = c
		if n[c] > 1 {
			parts[i] = fmt.Sprintf("%s ×%d", c, n[c])
		}
	}
	return strings.Join(parts, ", ")
}

// result is one native command's outcome.
type result struct {
	code           int
	stdout, stderr string
	win            window
	dur            time.Duration
	err            error // it could not be run at all
}

func (w window) seconds() float64 { return float64(w.end-w.start) / 1e9 }

// native runs script with /bin/sh -c in root/work.
func (h *harness) native(ctx context.Context, root string, env []string, script string, timeout time.Duration) result {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "/bin/sh", "-c", script)
	cmd.Dir, cmd.Env, cmd.WaitDelay = filepath.Join(root, "work"), env, time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	var res result
	res.win.start = time.Now().UnixNano()
	err := cmd.Run()
	res.win.end = time.Now().UnixNano()
	res.dur = time.Duration(res.win.end - res.win.start)
	res.stdout, res.stderr = stdout.String(), stderr.String()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		res.code = ee.ExitCode()
	case err != nil:
		res.err = err
	}
	return res
}

// trial runs script as a dryexec trial (the CLI, on h.rung) in root/work.
func (h *harness) trial(ctx context.Context, root string, env []string, script string, timeout time.Duration) (*dryexec.StateDelta, window, error) {
	args := []string{"run", "--json", "--rung", h.rung, "--cwd", filepath.Join(root, "work"), "--timeout", timeout.String()}
	for _, kv := range env {
		args = append(args, "--env", kv)
	}
	args = append(args, "--", "/bin/sh", "-c", script)
	var win window
	win.start = time.Now().UnixNano()
	out, errOut, err := h.cliSplit(ctx, env, args...)
	win.end = time.Now().UnixNano()
	var ee *exec.ExitError
	// 3, 4, 5: the trial ran and the policy wants a person (docs/decision.md).
	if errors.As(err, &ee) && slices.Contains([]int{3, 4, 5}, ee.ExitCode()) {
		err = nil
	}
	if err != nil {
		return nil, win, fmt.Errorf("%v\n%s%s", err, out, errOut)
	}
	// stdout is the delta alone; the command's live output went to stderr.
	var d dryexec.StateDelta
	if err := json.Unmarshal([]byte(out), &d); err != nil {
		return nil, win, fmt.Errorf("decoding the delta: %v\n%.2000s", err, out)
	}
	return &d, win, nil
}

// cli runs the dryexec CLI with the workload's environment and this mode's
// store; it returns stdout (stderr too when it fails).
func (h *harness) cli(ctx context.Context, env []string, args ...string) (string, error) {
	out, errOut, err := h.cliSplit(ctx, env, args...)
	if err != nil {
		return out + errOut, err
	}
	return out, nil
}

// cliSplit is cli with stdout and stderr apart, whatever the exit.
func (h *harness) cliSplit(ctx context.Context, env []string, args ...string) (string, string, error) {
	cmd := exec.CommandContext(ctx, h.bin, args...)
	cmd.Env = append(slices.Clone(env), "DRYEXEC_HOME="+filepath.Join(h.base, "state"))
	if h.runsc != "" {
		cmd.Env = append(cmd.Env, gvisorrung.RunscEnv+"="+h.runsc)
	}
	cmd.Dir = h.base
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	return stdout.String(), stderr.String(), err
}

// copyTemplate copies the template to root (cp -a keeps modes, owners, mtimes,
// hard links, symlinks and FIFOs) and scans the copy.
func (h *harness) copyTemplate(t *testing.T, tmpl, root string) tree {
	if out, err := exec.Command("cp", "-a", tmpl, root).CombinedOutput(); err != nil {
		t.Fatalf("copying the template: %v\n%s", err, out)
	}
	return mustScan(t, root)
}

func (h *harness) hasTool(name string) bool {
	if filepath.IsAbs(name) {
		st, err := os.Stat(name)
		return err == nil && st.Mode()&0o111 != 0
	}
	for _, dir := range filepath.SplitList(h.path) {
		if st, err := os.Stat(filepath.Join(dir, name)); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return true
		}
	}
	return false
}

// fileClock returns the time the kernel stamps a file written now with: its
// coarse clock, which lags time.Now by up to a tick.
func (h *harness) fileClock(t *testing.T) int64 {
	p := filepath.Join(h.base, "clock")
	if err := os.WriteFile(p, []byte{1}, 0o644); err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	return st.Mtim.Nano()
}

// startAfter returns the start of a run's window: the file clock, once it has
// passed every mtime of the tree before the run (the template was made just
// before), so that the run's own writes are exactly those stamped at or after
// it. It waits at most a clock tick or two; with nextSecond, until the next
// wall-clock second (see workload.nextSecond).
func (h *harness) startAfter(t *testing.T, before tree, nextSecond bool) int64 {
	now := time.Now().UnixNano()
	var latest int64
	for _, e := range before {
		if e.mtime <= now && e.mtime > latest {
			latest = e.mtime
		}
	}
	if nextSecond {
		latest = latest - latest%int64(time.Second) + int64(time.Second) - 1
	}
	for {
		if c := h.fileClock(t); c > latest {
			return c
		}
		time.Sleep(time.Millisecond)
	}
}

func mustScan(t *testing.T, root string) tree {
	t.Helper()
	tr, err := scan(root)
	if err != nil {
		t.Fatalf("scanning %s: %v", root, err)
	}
	return tr
}

// removeTree removes a tree even where a workload left directories without
// write or search permission for their owner.
func removeTree(root string) {
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	os.RemoveAll(root)
}

// gvisor runs every workload again with its trial on the gvisor rung (root
// only: the rung needs it) and returns its rows. Unavailable, it fails where
// DRYEXEC_REQUIRE names gvisor (make deps installs runsc) and skips otherwise.
func (h *harness) gvisor(t *testing.T) []*row {
	testreq.Need(t, testreq.GVisor, (&gvisorrung.Rung{}).Available(t.Context()))
	runsc, err := gvisorrung.FindRunsc("")
	if err != nil {
		t.Fatal(err)
	}
	g := *h
	g.mode, g.rung, g.runsc = "gvisor", "gvisor", runsc
	return g.all(t)
}

// host runs every workload again with its trial on the host rung (no
// isolation: the trial runs on a scratch copy of its working directory)
// and returns its rows. Only with hostEnv=1: the rung is not a sandbox, so
// its rows say how far its delta matches a native run, not a guarantee.
func (h *harness) host(t *testing.T) []*row {
	if os.Getenv(hostEnv) == "" {
		t.Skip("set " + hostEnv + "=1 to run the workloads on the host rung")
	}
	o := *h
	o.mode, o.rung = "host", "host"
	return o.all(t)
}

// vm runs every workload again with its trial on the vm rung (root only, a
// VM boot per trial) and returns its rows. Only with DRYEXEC_TEST_VM=1 (make
// test-vm): under TCG each trial costs seconds of boot. Unavailable, it fails
// where DRYEXEC_REQUIRE names vm and skips otherwise.
func (h *harness) vm(t *testing.T) []*row {
	if os.Getenv(vmEnv) == "" {
		t.Skip("set " + vmEnv + "=1 (make test-vm) to run the workloads on the vm rung")
	}
	// The probe boots the guest beside the CLI: static, as the VM's
	// initramfs (no libc) needs, where this test binary may not be.
	t.Setenv(guestexe.Env, filepath.Join(filepath.Dir(h.bin), "dryexec-guest"))
	testreq.Need(t, testreq.VM, (&vmrung.Rung{}).Available(t.Context()))
	v := *h
	v.mode, v.rung = "vm", "vm"
	// The command runs under TCG on one vCPU: python_venv's, pip's and npm's
	// trials take minutes there.
	v.trialScale = 10
	return v.all(t)
}

// all runs every workload in h's mode, one subtest each, and returns a row
// per workload.
func (h *harness) all(t *testing.T) []*row {
	var rows []*row
	for _, w := range workloads {
		t.Run(w.name, func(t *testing.T) {
			// The row goes in first: it records a skip or a harness failure too.
			r := &row{Workload: w.name, Mode: h.mode}
			rows = append(rows, r)
			defer func() {
				r.Run, r.Load = h.run, loadAverage()
				// Into the table at once: a long run (vm) cut short
				// still leaves the rows it finished.
				if p := os.Getenv(tableEnv); p != "" && !rootless.Active() {
					if err := writeTable(p, []*row{r}, h.calibrate); err != nil {
						t.Error(err)
					}
				}
			}()
			h.workload(t, w, r)
		})
	}
	return rows
}

// rootless re-runs TestFidelity as uid 65534 and returns its rows.
func (h *harness) rootless(t *testing.T) (rows []*row) {
	if _, err := h.goCache(); err != nil && h.hasTool("go") {
		t.Fatal(err)
	}
	dir := filepath.Join(h.base, "rows")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(dir, rootless.UID, rootless.UID); err != nil {
		t.Fatal(err)
	}
	rowsFile := filepath.Join(dir, "rows.json")
	cache, _ := h.goCache()
	pattern := "^TestFidelity$"
	if f := flag.Lookup("test.run"); f != nil && strings.HasPrefix(f.Value.String(), "TestFidelity/") {
		pattern = "^" + f.Value.String()
	}
	env := []string{"PATH=" + h.path, binEnv + "=" + h.bin, goCacheEnv + "=" + cache, rowsEnv + "=" + rowsFile}
	for _, k := range []string{testreq.Env, testreq.LogEnv, calibrateEnv} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	// Read the rows even when the re-run fails (t.Fatal): the table shows why.
	defer func() {
		b, err := os.ReadFile(rowsFile)
		if err == nil {
			err = json.Unmarshal(b, &rows)
		}
		if err != nil {
			t.Logf("no rows from the rootless run: %v", err)
		}
	}()
	rootless.Rerun(t, pattern, 20*time.Minute, env...)
	return nil // the deferred read fills rows
}

func writeRows(t *testing.T, path string, rows []*row) {
	b, err := json.Marshal(rows)
	if err == nil {
		err = os.WriteFile(path, b, 0o644)
	}
	if err != nil {
		t.Errorf("writing the rows: %v", err)
	}
}

// writeTable writes the results as Markdown: one row per workload and mode,
// then every difference. The rows also go to path's rows file (rowsFile),
// and every row of the last table for a workload and mode not in rows is
// kept from there: the vm mode runs apart (make test-vm), a run of a few
// workloads (-run) replaces only theirs, and a run cut short keeps what
// it finished (each workload's row is written as it ends).
func writeTable(path string, rows []*row, calibrate bool) error {
	order := map[string]int{}
	for i, w := range workloads {
		order[w.name] = i
	}
	ran := map[[2]string]bool{}
	for _, r := range rows {
		ran[[2]string{r.Workload, r.Mode}] = true
	}
	rows = slices.Clone(rows)
	if b, err := os.ReadFile(rowsFile(path)); err == nil {
		var old []*row
		if err := json.Unmarshal(b, &old); err != nil {
			return fmt.Errorf("reading the last run's rows: %w", err)
		}
		for _, r := range old {
			if _, known := order[r.Workload]; known && !ran[[2]string{r.Workload, r.Mode}] {
				rows = append(rows, r)
			}
		}
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if order[rows[i].Workload] != order[rows[j].Workload] {
			return order[rows[i].Workload] < order[rows[j].Workload]
		}
		return rows[i].Mode < rows[j].Mode
	})
	var b strings.Builder
	kernel, _ := exec.Command("uname", "-r").Output()
	fmt.Fprintf(&b, "# Fidelity: native runs vs dryexec trials (`make fidelity`, `make test-vm`)\n\n")
	fmt.Fprintf(&b, "Kernel %s, %d CPUs; ns rung (root, rootless) and gvisor rung from `make fidelity`, vm rung from `make test-vm`. How to read it: docs/fidelity.md. Each mode's last run (times move with the load):\n\n",
		strings.TrimSpace(string(kernel)), runtime.NumCPU())
	// Each mode's runs, with how many rows each gave and the load averages
	// its workloads ended under.
	type runInfo struct {
		rows  int
		loads []string
	}
	runs := map[string]map[string]*runInfo{}
	var modes []string
	for _, r := range rows {
		if runs[r.Mode] == nil {
			runs[r.Mode] = map[string]*runInfo{}
			modes = append(modes, r.Mode)
		}
		ri := runs[r.Mode][r.Run]
		if ri == nil {
			ri = &runInfo{}
			runs[r.Mode][r.Run] = ri
		}
		ri.rows++
		if r.Load != "" {
			ri.loads = append(ri.loads, r.Load)
		}
	}
	sort.Strings(modes)
	for _, m := range modes {
		var parts []string
		for run, ri := range runs[m] {
			part := fmt.Sprintf("%s (%d rows", cmp.Or(run, "?"), ri.rows)
			if len(ri.loads) > 0 {
				slices.SortFunc(ri.loads, func(a, b string) int { return cmp.Compare(parseLoad(a), parseLoad(b)) })
				if lo, hi := ri.loads[0], ri.loads[len(ri.loads)-1]; lo == hi {
					part += ", load average " + lo
				} else {
					part += fmt.Sprintf(", load average %s–%s", lo, hi)
				}
			}
			parts = append(parts, part+")")
		}
		sort.Strings(parts)
		fmt.Fprintf(&b, "- %s: %s\n", m, strings.Join(parts, "; "))
	}
	b.WriteString("\n")
	if calibrate {
		b.WriteString("**Calibration run**: \"trial\" is a second native run; differences are nondeterminism.\n\n")
	}
	exact, n := 0, 0
	b.WriteString("| workload | mode | native s | trial s | ratio | commit s | verdict |\n|---|---|---:|---:|---:|---:|---|\n")
	for _, r := range rows {
		ratio := "–"
		if r.NativeS > 0 && r.TrialS > 0 {
			ratio = fmt.Sprintf("%.2f", r.TrialS/r.NativeS)
		}
		if r.Verdict == "exact" {
			exact++
		}
		n++
		v := r.Verdict
		if r.Known != "" {
			v += " (known)"
		}
		fmt.Fprintf(&b, "| %s | %s | %.2f | %.2f | %s | %.2f | %s |\n", r.Workload, r.Mode, r.NativeS, r.TrialS, ratio, r.CommitS, md(v))
	}
	fmt.Fprintf(&b, "\n%d of %d exact.\n", exact, n)
	b.WriteString("\n## Every difference\n")
	for _, r := range rows {
		if len(r.Diffs) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n### %s (%s)\n\n", r.Workload, r.Mode)
		if r.Known != "" {
			fmt.Fprintf(&b, "Known (knownDiffering): %s\n\n", md(r.Known))
		}
		// At most maxPerClass of each class (a venv has 1,489 of one); the
		// test's log has them all.
		shown, total := map[string]int{}, map[string]int{}
		for _, d := range r.Diffs {
			total[diffClass(d)]++
		}
		for _, d := range r.Diffs {
			c := diffClass(d)
			if shown[c]++; shown[c] <= maxPerClass {
				fmt.Fprintf(&b, "- %s\n", md(d))
			} else if shown[c] == maxPerClass+1 {
				fmt.Fprintf(&b, "- … and %d more %s (the test's log lists them)\n", total[c]-maxPerClass, c)
			}
		}
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	js, err := json.MarshalIndent(rows, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(rowsFile(path), append(js, '\n'), 0o644); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// rowsFile is where writeTable keeps the rows of the table at path.
func rowsFile(path string) string {
	return strings.TrimSuffix(path, filepath.Ext(path)) + ".json"
}

// maxPerClass is how many differences of one class the table lists for a
// workload.
const maxPerClass = 12

// diffClass is the class of a diff's String().
func diffClass(s string) string {
	c, _, _ := strings.Cut(s, ": ")
	return c
}

// loadAverage is the 1-minute load average, for the table's header.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) > 0 {
		return f[0]
	}
	return "?"
}

func parseLoad(s string) float64 {
	var f float64
	fmt.Sscanf(s, "%g", &f)
	return f
}

// md makes s safe in a Markdown table cell or list item.
func md(s string) string {
	s = strings.ReplaceAll(s, "\n", " ")
	s = strings.ReplaceAll(s, "|", `\|`)
	return strings.ReplaceAll(s, "`", "'")
}
