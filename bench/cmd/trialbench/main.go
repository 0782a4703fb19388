//go:build linux

// Command trialbench is `make bench`: the whole benchmark suite. Each group
// measures candidates against baselines interleaved in the same run (each
// round runs every candidate of the group once, in turn), so that the
// machine's drift and noise hit all of them alike. It writes a Markdown table
// and a PNG chart; docs/benchmarks.md says how to read them.
//
//	go run ./bench/cmd/trialbench [-n 20] [-out bench/results] [-only trial,diff] [-note TEXT]
//
// It needs root (or user namespaces; the network group needs root, for a
// network namespace of its own), and bwrap (Debian: bubblewrap), unshare,
// cp and python3 for the baselines; a missing baseline fails the run, it is
// never faked.
package main

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/guest"
	"github.com/dryexec/dryexec/internal/guestexe"
	"github.com/dryexec/dryexec/internal/runflags"
	"github.com/dryexec/dryexec/internal/smallfront"
	"github.com/dryexec/dryexec/netsim/netproc"
	"github.com/dryexec/dryexec/netsim/netrole"
)

// inNetNS marks the re-executed benchmark running in a network namespace of
// its own (see ownNetNS).
const inNetNS = "DRYEXEC_BENCH_OWN_NETNS"

// groupKeys are the groups in the order they run; -only picks among them.
var groupKeys = []string{"trial", "cli", "rungs", "warm", "throughput", "diff", "commit", "sessions", "fork", "net", "memory", "bigdelta", "collect", "images"}

func main() {
	guest.MaybeMain(os.Args)
	netrole.MaybeMain(os.Args)
	if len(os.Args) > 1 && os.Args[1] == httpsClientArg {
		os.Exit(httpsClient(os.Args[2:]))
	}
	var cfg config
	flag.IntVar(&cfg.rounds, "n", 20, "rounds (each candidate runs once per round)")
	flag.StringVar(&cfg.out, "out", "", "directory for the Markdown report and the PNG chart (default: stdout only)")
	flag.IntVar(&cfg.tree, "tree", 100000, "files in the largest tree of the diff and session benchmarks")
	flag.IntVar(&cfg.files, "files", 1000, "files a trial writes for the commit benchmark")
	flag.IntVar(&cfg.bigFiles, "bigfiles", 1000000, "files the trial of the bigdelta benchmark creates")
	flag.StringVar(&cfg.only, "only", "", "comma-separated groups to run ("+strings.Join(groupKeys, ", ")+"); default all")
	flag.StringVar(&cfg.note, "note", "", "a line printed at the top of the report (e.g. that the machine was busy)")
	flag.Parse()
	if err := ownNetNS(); err != nil {
		log.Fatal(err)
	}
	if err := run(context.Background(), cfg); err != nil {
		log.Fatal(err)
	}
}

type config struct {
	rounds, tree, files, bigFiles int
	out, only, note               string
}

// ownNetNS re-executes the benchmark in a network namespace of its own (root
// only), with lo up and nothing else: the network group's trials go through
// netsim, and if a bug let their traffic past it, it could still not leave
// the machine (the rule test/network follows). Without root the benchmark
// runs where it is and the network group is skipped. It returns only in the
// process that should run the benchmark.
func ownNetNS() error {
	if os.Getenv(inNetNS) != "" {
		if out, err := exec.Command("ip", "link", "set", "lo", "up").CombinedOutput(); err != nil {
			return fmt.Errorf("lo up in the benchmark's network namespace: %v %s", err, out)
		}
		return nil
	}
	if os.Getuid() != 0 {
		return nil
	}
	cmd := exec.Command("/proc/self/exe", os.Args[1:]...)
	cmd.Env = append(os.Environ(), inNetNS+"=1")
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET, Pdeathsig: syscall.SIGKILL}
	err := cmd.Run()
	if ee, ok := err.(*exec.ExitError); ok {
		os.Exit(ee.ExitCode())
	}
	if err != nil {
		return fmt.Errorf("cannot make a network namespace for the benchmark: %w", err)
	}
	os.Exit(0)
	return nil
}

// candidate is one row. run returns the measured value in its group's unit;
// prep, when set, runs before every run and is not measured.
type candidate struct {
	name  string
	label string // heads its ratio column when it is a baseline (default: name up to a space)
	prep  func() error
	run   func() (float64, error)
}

// group is one table: its candidates run interleaved; ratios are to the
// candidates at bases (one ratio column each). One -only key may make
// several groups.
type group struct {
	key   string // what -only names
	title string
	unit  unit
	bases []int
	cands []candidate
	note  string // printed under the table
	// extra, when set, adds to the note what only the run found out.
	extra func() string
	// close, when set, releases what the group held, once it is measured.
	close func()
	// rounds, when set, replaces -n, and the warm-up run is skipped: a
	// group whose sample takes minutes.
	rounds int
}

// env is what every group's setup shares.
type env struct {
	ctx     context.Context
	cfg     config
	work    string // removed at the end
	bin     string // dryexec as `make build` installs it: the small front (internal/smallfront)
	goFront string // dryexec-front beside it: the Go front (cmd/dryexec-front)
	engine  string // dryexec-engine beside it: the whole CLI (cmd/dryexec, what `go run` builds)
	empty   string // an empty directory
	trees   map[int]string
	phases  map[string][]time.Duration // the traced cold trial's phases
	cleanup []func()
}

// onExit registers f to run when the benchmark ends, last registered first.
func (e *env) onExit(f func()) { e.cleanup = append(e.cleanup, f) }

func run(ctx context.Context, cfg config) (err error) {
	var keep []string
	if cfg.only != "" {
		keep = strings.Split(cfg.only, ",")
		for _, k := range keep {
			if !slices.Contains(groupKeys, k) {
				return fmt.Errorf("-only: no group %q (%s)", k, strings.Join(groupKeys, ", "))
			}
		}
	}
	wants := func(k string) bool { return keep == nil || slices.Contains(keep, k) }
	work, err := os.MkdirTemp("", "trialbench-")
	if err != nil {
		return err
	}
	e := &env{ctx: ctx, cfg: cfg, work: work, trees: map[int]string{}, phases: map[string][]time.Duration{}}
	defer func() {
		for _, f := range slices.Backward(e.cleanup) {
			f()
		}
		os.RemoveAll(work)
	}()
	// The layout of `make build`: the front, the engine, the local engine,
	// the guest and the netsim roles side by side.
	e.bin, e.goFront, e.engine = filepath.Join(work, "dryexec"), filepath.Join(work, smallfront.GoFrontName), filepath.Join(work, "dryexec-engine")
	guestBin := filepath.Join(work, guestexe.Name)
	netsimBin, openAPIBin := filepath.Join(work, netproc.ExeName), filepath.Join(work, netproc.OpenAPIExeName)
	for out, pkg := range map[string]string{e.goFront: "./cmd/dryexec-front", e.engine: "./cmd/dryexec", guestBin: "./cmd/dryexec-guest",
		netsimBin: "./cmd/dryexec-netsim", openAPIBin: "./cmd/dryexec-netsim-openapi",
		filepath.Join(work, runflags.LocalName): "-tags=dryexec_nocel ./cmd/dryexec-local"} {
		build := exec.Command("go", append([]string{"build", "-o", out}, strings.Fields(pkg)...)...)
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("building %s: %v\n%s", pkg, err, b)
		}
	}
	if err := smallfront.Install(e.bin); err != nil {
		return fmt.Errorf("the small front: %w", err)
	}
	// The in-process candidates start the same small guest binary the CLI
	// finds beside itself.
	os.Setenv(guestexe.Env, guestBin)
	e.empty = filepath.Join(work, "empty")
	if err := os.Mkdir(e.empty, 0o755); err != nil {
		return err
	}
	m := describeMachine()
	makers := map[string]func(*env) ([]group, error){
		"trial": trialGroup, "cli": cliGroup, "rungs": rungsGroup, "warm": warmGroup, "throughput": throughputGroup, "diff": diffGroup,
		"commit": commitGroup, "sessions": sessionGroup, "fork": forkGroup, "net": netGroup, "memory": memoryGroup,
		"bigdelta": bigDeltaGroup, "collect": collectGroup, "images": imagesGroup,
	}
	var groups []group
	var sections [][]result
	for _, k := range groupKeys {
		if !wants(k) {
			continue
		}
		gs, err := makers[k](e)
		if errors.Is(err, errSkip) {
			fmt.Fprintf(os.Stderr, "%s: %v\n", k, err)
			g := group{key: k, title: k}
			if len(gs) > 0 {
				g = gs[0]
			}
			g.note = err.Error()
			groups = append(groups, g)
			sections = append(sections, nil)
			continue
		}
		if err != nil {
			return fmt.Errorf("setting up %s: %w", k, err)
		}
		for _, g := range gs {
			fmt.Fprintf(os.Stderr, "%s: %d candidates × %d rounds\n", g.title, len(g.cands), cmp.Or(g.rounds, cfg.rounds))
			res, err := measure(g, cmp.Or(g.rounds, cfg.rounds))
			if g.close != nil {
				g.close()
			}
			if err != nil {
				return fmt.Errorf("%s: %w", k, err)
			}
			groups = append(groups, g)
			sections = append(sections, res)
		}
	}
	m.loadEnd = loadavg()
	report := formatReport(m, cfg, groups, sections, e.phases)
	fmt.Print(report)
	if cfg.out == "" {
		return nil
	}
	if err := os.MkdirAll(cfg.out, 0o755); err != nil {
		return err
	}
	png, err := chart(m, cfg, groups, sections)
	if err != nil {
		return fmt.Errorf("chart: %w", err)
	}
	// A partial run is kept beside the full one, never as latest.
	prefix := "bench"
	if cfg.only != "" {
		prefix = strings.ReplaceAll(cfg.only, ",", "+")
	}
	names := []string{prefix + "-" + m.start.Format("2006-01-02")}
	if cfg.only == "" {
		names = append(names, "latest")
	}
	for _, n := range names {
		if err := os.WriteFile(filepath.Join(cfg.out, n+".md"), []byte(report), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(cfg.out, n+".png"), png, 0o644); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "wrote %s.{md,png} in %s\n", strings.Join(names, ".{md,png}, "), cfg.out)
	return nil
}

// errSkip: a group cannot run here (said in the report, not an error).
var errSkip = errors.New("skipped")

// measure runs one warm-up of every candidate (which also fails early), then
// the rounds, interleaved.
func measure(g group, rounds int) ([]result, error) {
	res := make([]result, len(g.cands))
	one := func(c candidate) (float64, error) {
		if c.prep != nil {
			if err := c.prep(); err != nil {
				return 0, fmt.Errorf("%s: preparing: %w", c.name, err)
			}
		}
		v, err := c.run()
		if err != nil {
			return 0, fmt.Errorf("%s: %w", c.name, err)
		}
		return v, nil
	}
	for i, c := range g.cands {
		res[i].name, res[i].label = c.name, c.label
		if g.rounds > 0 {
			continue
		}
		if _, err := one(c); err != nil {
			return nil, err
		}
	}
	for range rounds {
		for i, c := range g.cands {
			v, err := one(c)
			if err != nil {
				return nil, err
			}
			res[i].vals = append(res[i].vals, v)
		}
	}
	for i := range res {
		slices.Sort(res[i].vals)
	}
	return res, nil
}

// timed measures f's wall time in milliseconds.
func timed(f func() error) func() (float64, error) {
	return func() (float64, error) {
		s := time.Now()
		err := f()
		return msOf(time.Since(s)), err
	}
}

func msOf(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e6 }

// command runs argv in dir (outside any sandbox), output discarded.
func (e *env) command(dir string, argv ...string) func() error {
	return func() error {
		c := exec.Command(argv[0], argv[1:]...)
		c.Dir, c.Env = dir, []string{"PATH=/usr/bin:/bin", "DRYEXEC_HOME=" + filepath.Join(e.work, "home")}
		c.Stdout, c.Stderr = io.Discard, io.Discard
		return c.Run()
	}
}

var benchEnv = map[string]string{"PATH": "/usr/bin:/bin"}

// trial runs argv in dir as an ns trial and fails unless it exits 0.
func (e *env) trial(r dryexec.Rung, dir string, argv ...string) error {
	return checkDelta(r.Trial(e.ctx, dryexec.TrialSpec{Action: dryexec.Action{Argv: argv, Cwd: dir, Env: benchEnv}}))
}

func checkDelta(d *dryexec.StateDelta, err error) error {
	if err == nil && (d.Process.ExitCode != 0 || d.Process.Signal != "") {
		err = fmt.Errorf("%v: exit %d %s: %s", d.Action.Argv, d.Process.ExitCode, d.Process.Signal, d.Process.Stderr)
	}
	return err
}

// tree returns a directory of files spread over directories of 100 each
// (d0 always exists), made once per size.
func (e *env) tree(files int) (string, error) {
	if t, ok := e.trees[files]; ok {
		return t, nil
	}
	root := filepath.Join(e.work, fmt.Sprintf("tree%d", files))
	if err := os.MkdirAll(filepath.Join(root, "d0"), 0o755); err != nil {
		return "", err
	}
	for i := range files {
		dir := filepath.Join(root, fmt.Sprintf("d%d", i/100))
		if i%100 == 0 {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return "", err
			}
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d", i)), []byte("x"), 0o644); err != nil {
			return "", err
		}
	}
	e.trees[files] = root
	return root, nil
}
