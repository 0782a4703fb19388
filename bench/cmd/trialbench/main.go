//go:build linux

// Command trialbench measures a trial's wall time against baselines, interleaved
// in the same run (each round runs every candidate once, in turn), so that the
// machine's drift and noise hit all of them alike. It writes a Markdown table.
//
//	go run ./bench/cmd/trialbench [-n 40] [-out bench/results]
//
// It needs root or user namespaces, and bwrap (Debian: bubblewrap) and unshare
// for the baselines; a missing baseline is reported, not faked.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/guest"
	"github.com/dryexec/dryexec/rung/linuxns"
)

func main() {
	guest.MaybeMain(os.Args)
	n := flag.Int("n", 40, "rounds (each candidate runs once per round)")
	out := flag.String("out", "", "directory for the Markdown report (default: stdout only)")
	files := flag.Int("tree", 100000, "files in the large tree of the diff benchmark")
	only := flag.String("only", "", "comma-separated groups to run (trial, diff, sessions); default all")
	flag.Parse()
	if err := run(*n, *files, *out, *only); err != nil {
		log.Fatal(err)
	}
}

type candidate struct {
	name string
	run  func() error
}

// group is one table: its candidates run interleaved; ratios are to base.
type group struct {
	key   string // what -only names
	title string
	base  int
	cands []candidate
}

type result struct {
	name string
	durs []time.Duration
}

func (r result) median() time.Duration { return r.durs[len(r.durs)/2] }

func run(n, treeFiles int, outDir, only string) error {
	ctx := context.Background()
	work, err := os.MkdirTemp("", "trialbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	bin := filepath.Join(work, "dryexec")
	guestBin := filepath.Join(work, guest.ExeName)
	for out, pkg := range map[string]string{bin: "./cmd/dryexec", guestBin: "./cmd/dryexec-guest"} {
		build := exec.Command("go", "build", "-o", out, pkg)
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := build.CombinedOutput(); err != nil {
			return fmt.Errorf("building %s: %v\n%s", pkg, err, b)
		}
	}
	// The in-process candidates start the same small guest binary the CLI
	// finds beside itself.
	os.Setenv(guest.ExeEnv, guestBin)
	empty := filepath.Join(work, "empty")
	tree := filepath.Join(work, "tree")
	os.Mkdir(empty, 0o755)
	if err := makeTree(tree, treeFiles); err != nil {
		return err
	}
	env := map[string]string{"PATH": "/usr/bin:/bin"}
	phases := map[string][]time.Duration{}
	var t0 time.Time
	traced := &linuxns.Rung{Trace: func(p string) { phases[p] = append(phases[p], time.Since(t0)) }}
	plain := &linuxns.Rung{}
	trial := func(r *linuxns.Rung, dir string, argv ...string) error {
		d, err := r.Trial(ctx, dryexec.TrialSpec{Action: dryexec.Action{Argv: argv, Cwd: dir, Env: env}})
		if err == nil && d.Process.ExitCode != 0 {
			err = fmt.Errorf("%v: exit %d: %s", argv, d.Process.ExitCode, d.Process.Stderr)
		}
		return err
	}
	cmd := func(argv ...string) func() error {
		return func() error {
			c := exec.Command(argv[0], argv[1:]...)
			c.Dir, c.Env = empty, []string{"PATH=/usr/bin:/bin", "DRYEXEC_HOME=" + filepath.Join(work, "home")}
			c.Stdout, c.Stderr = io.Discard, io.Discard
			return c.Run()
		}
	}
	sess, closeSessions, err := openSessions(ctx, treeFiles)
	if err != nil {
		return err
	}
	defer closeSessions()
	groups := []group{
		{"trial", "Cold trial of /bin/true vs baselines", 2, []candidate{
			{"dryexec run -- /bin/true (CLI process, full delta)", cmd(bin, "run", "--no-store", "--json", "--", "/bin/true")},
			{"Rung.Trial(/bin/true) in-process (library/daemon path)", func() error { t0 = time.Now(); return trial(traced, empty, "/bin/true") }},
			{"bwrap --ro-bind / / --unshare-all --dev /dev --proc /proc /bin/true", cmd("bwrap", "--ro-bind", "/", "/", "--unshare-all", "--dev", "/dev", "--proc", "/proc", "/bin/true")},
			{"unshare -m -p -f -i -u -n /bin/true", cmd("unshare", "-m", "-p", "-f", "-i", "-u", "-n", "/bin/true")},
			{"fork+exec /bin/true", cmd("/bin/true")},
		}},
		{"diff", "Diff cost vs tree size (must be flat)", 0, []candidate{
			{"trial writing 1 file, empty tree", func() error { return trial(plain, empty, "sh", "-c", "echo x > f") }},
			{fmt.Sprintf("trial writing 1 file, %d-file tree", treeFiles), func() error { return trial(plain, tree, "sh", "-c", "echo x > d0/f") }},
		}},
		{"sessions", "Sessions", 0, sessionCandidates(ctx, sess, treeFiles, func(argv ...string) error { return cmd(argv...)() })},
	}
	if only != "" {
		keep := strings.Split(only, ",")
		groups = slices.DeleteFunc(groups, func(g group) bool { return !slices.Contains(keep, g.key) })
		if len(groups) == 0 {
			return fmt.Errorf("-only %q names no group (trial, diff, sessions)", only)
		}
	}
	var sections [][]result
	for _, g := range groups {
		res := make([]result, len(g.cands))
		for i, c := range g.cands {
			res[i].name = c.name
			if err := c.run(); err != nil { // warm up, and fail early
				return fmt.Errorf("%s: %w", c.name, err)
			}
		}
		for round := 0; round < n; round++ {
			for i, c := range g.cands {
				s := time.Now()
				if err := c.run(); err != nil {
					return fmt.Errorf("%s: %w", c.name, err)
				}
				res[i].durs = append(res[i].durs, time.Since(s))
			}
		}
		for i := range res {
			sort.Slice(res[i].durs, func(a, b int) bool { return res[i].durs[a] < res[i].durs[b] })
		}
		sections = append(sections, res)
	}
	report := format(n, groups, sections, phases)
	fmt.Print(report)
	if outDir != "" {
		if err := os.MkdirAll(outDir, 0o755); err != nil {
			return err
		}
		// A partial run is kept beside the full one, never as latest.md.
		prefix := "trial"
		if only != "" {
			prefix = strings.ReplaceAll(only, ",", "+")
		}
		name := filepath.Join(outDir, prefix+"-"+time.Now().UTC().Format("2006-01-02")+".md")
		if err := os.WriteFile(name, []byte(report), 0o644); err != nil || only != "" {
			return err
		}
		return os.WriteFile(filepath.Join(outDir, "latest.md"), []byte(report), 0o644)
	}
	return nil
}

func format(n int, groups []group, sections [][]result, phases map[string][]time.Duration) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Trial benchmark\n\n%s, %s/%s, %d CPUs, %s, uid %d; %d interleaved rounds per candidate.\n\n",
		time.Now().UTC().Format(time.RFC3339), runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), kernel(), os.Getuid(), n)
	for si, res := range sections {
		base := res[groups[si].base]
		fmt.Fprintf(&b, "## %s\n\n| candidate | median | min | max | ratio to %s |\n|---|---:|---:|---:|---:|\n", groups[si].title, short(base.name))
		for _, r := range res {
			fmt.Fprintf(&b, "| %s | %s | %s | %s | %.2f |\n", r.name, ms(r.median()), ms(r.durs[0]), ms(r.durs[len(r.durs)-1]),
				float64(r.median())/float64(base.median()))
		}
		b.WriteString("\n")
	}
	if len(phases) == 0 {
		return b.String()
	}
	b.WriteString("## Where an in-process trial's time goes (median time since Trial() was called)\n\n| phase | median |\n|---|---:|\n")
	for _, p := range []string{"start", "hello", "view", "exit", "done", "pipes", "net"} {
		d := phases[p]
		if len(d) == 0 {
			continue
		}
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		fmt.Fprintf(&b, "| %s | %s |\n", p, ms(d[len(d)/2]))
	}
	b.WriteString("\nstart: guest process cloned into its namespaces; hello: the guest's Go runtime is up;\n" +
		"view: overlays, /proc, /dev mounted and pivoted; exit: the command ran and everything it\n" +
		"started is dead; done: upper dirs walked, hashed and diffed into the delta; net: netsim stopped and its log in the delta.\n")
	return b.String()
}

func short(name string) string {
	if i := strings.IndexByte(name, ' '); i > 0 {
		return name[:i]
	}
	return name
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d.Microseconds())/1000) }

func kernel() string {
	b, _ := os.ReadFile("/proc/sys/kernel/osrelease")
	return "Linux " + strings.TrimSpace(string(b))
}

// makeTree creates files spread over directories of 100 each.
func makeTree(root string, files int) error {
	for i := 0; i < files; i++ {
		dir := filepath.Join(root, fmt.Sprintf("d%d", i/100))
		if i%100 == 0 {
			if err := os.MkdirAll(dir, 0o755); err != nil {
				return err
			}
		}
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d", i)), []byte("x"), 0o644); err != nil {
			return err
		}
	}
	return nil
}
