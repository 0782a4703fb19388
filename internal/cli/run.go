package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/netsim"
	"github.com/dryexec/dryexec/policy"
	"github.com/dryexec/dryexec/render"
	"github.com/dryexec/dryexec/rung"
	"github.com/dryexec/dryexec/server"
	"github.com/dryexec/dryexec/store"
)

func runCmd(env Env, code *int, note *interruptNote) *cobra.Command {
	var (
		rungName  string
		asJSON    bool
		timeout   time.Duration
		setEnv    []string
		passEnv   []string
		withStdin bool
		outputCap int
		upperSize int64
		// content the store keeps of this trial (docs/limits.md)
		contentCap string
		noStore    bool
		cwd        string
		// --commit, -i and --force
		doCommitFlag, interactive, force bool
		policyFile                       string
		// limits and masks (docs/limits.md)
		memory         string
		pids           int64
		cpus           float64
		masks          []string
		noDefaultMasks bool
		// network (docs/network.md)
		netSpecs []string
		// live output
		quiet bool
		// what run's own status says (exitstatus.go)
		exitStatus string
		// where the trial runs (via.go)
		viaFlag string
		// an image's root filesystem instead of the host's (runimage.go)
		imageRef string
	)
	c := &cobra.Command{
		Use:   "run [flags] -- CMD [ARG...]",
		Short: "Run CMD in a trial, print what it would change, change nothing",
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				// Nothing to run: how to use it says more than an error.
				fmt.Fprint(env.Stderr, cmd.UsageString())
				return usageError{errors.New("no command: give it after --, as in dryexec run -- make test")}
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			// A soft limit on this process's heap, unless GOMEMLIMIT sets
			// one: Go's default lets the heap grow to twice what is live
			// before it collects, and a trial of a million files has
			// hundreds of MB live. Under the limit the collector runs more
			// often instead (at most half a CPU, by the runtime's own
			// guard, when more than the limit is live). A small trial never
			// gets near it. docs/limits.md, "Big deltas: memory".
			if env.Getenv("GOMEMLIMIT") == "" {
				debug.SetMemoryLimit(runMemoryLimit)
			}
			if err := checkExitStatus(exitStatus); err != nil {
				return err
			}
			via, err := viaMode(viaFlag, env)
			if err != nil {
				return err
			}
			// The policy is read first: a mistake in it is the caller's (exit 2)
			// and must not cost a trial. The built-in one is compiled only
			// if the trial runs here: through the daemon it is not needed.
			pol, engine := policy.Default(), (*policy.Engine)(nil)
			if policyFile != "" {
				if pol, err = policy.Load(policyFile); err != nil {
					return usageError{err}
				}
				if engine, err = policy.Compile(pol); err != nil {
					return usageError{err}
				}
			}
			// Everything the caller could have got wrong is checked before
			// anything runs or is stored: a mistake is exit 2 with what to do,
			// never 125 ("dryexec itself failed").
			if imageRef == "" {
				if cwd, err = checkRunArgs(rungName, args, cwd, timeout, outputCap, upperSize); err != nil {
					return err
				}
			} else {
				// The cwd is the image's: checked in it, defaulted from it.
				if err := checkImageCwd(cwd); err != nil {
					return err
				}
				if _, err = checkRunArgs(rungName, args, "/", timeout, outputCap, upperSize); err != nil {
					return err
				}
			}
			if netSpecs, err = checkNetSpecs(cmd.Context(), netSpecs, env); err != nil {
				return err
			}
			if noStore && (doCommitFlag || interactive) {
				return usageError{fmt.Errorf("--commit and -i need the trial stored; drop --no-store")}
			}
			if force && !doCommitFlag && !interactive {
				return usageError{fmt.Errorf("--force only says what --commit or -i may commit; add one, or drop --force")}
			}
			home, err := dryexec.DefaultHome(env.Getenv)
			if err != nil {
				return err
			}
			var cc int64
			if contentCap != "" {
				if cc, err = parseBytes(contentCap); err != nil {
					return usageError{fmt.Errorf("--content-cap: %w", err)}
				}
			}
			// The environment is an allowlist (dryexec.SandboxEnv): --env NAME
			// passes a variable through, --env NAME=VALUE sets one.
			pass, set := passEnv, []string(nil)
			for _, kv := range setEnv {
				if strings.Contains(kv, "=") {
					set = append(set, kv)
				} else {
					pass = append(pass, kv)
				}
			}
			a := dryexec.Action{Argv: args, Cwd: cwd, TimeoutMS: timeout.Milliseconds()}
			sandboxEnv := dryexec.SandboxEnv
			if imageRef != "" {
				sandboxEnv = dryexec.ImageCallerEnv
			}
			if a.Env, err = sandboxEnv(env.Getenv, callerEnviron(env), pass, set); err != nil {
				return usageError{err}
			}
			a.Env["PWD"] = cwd
			spec := dryexec.TrialSpec{TrialID: dryexec.NewTrialID(), Action: a, OutputCap: outputCap, UpperSizeBytes: upperSize,
				Limits: dryexec.Limits{Pids: pids, CPUs: cpus}, Masks: masks, NoDefaultMasks: noDefaultMasks}
			if spec.Limits.MemoryBytes, err = parseBytes(memory); err != nil {
				return usageError{fmt.Errorf("--memory: %w", err)}
			}
			if err := spec.Limits.Check(); err != nil {
				return usageError{err}
			}
			if _, err := dryexec.MaskPaths([]string{"/"}, masks, true); err != nil {
				return usageError{err}
			}
			if withStdin {
				spec.Stdin = env.Stdin
			}
			// Live output: the command's stdout and stderr as it runs (the
			// delta still holds their tails, within --output-cap). With
			// --json, stdout holds only the delta, so both go to stderr.
			var live []*render.LiveWriter
			if !quiet {
				outW := env.Stdout
				if asJSON {
					outW = env.Stderr
				}
				lo, le := render.NewLiveWriterPair(outW, isTTY(outW), env.Stderr, isTTY(env.Stderr))
				spec.Stdout, spec.Stderr, live = lo, le, []*render.LiveWriter{lo, le}
			}
			spec.Net = netSpecs
			var d *dryexec.StateDelta
			var st *store.Store
			if via != viaLocal {
				// On an image, the daemon pulls it into its store's cache
				// (this install's: $DRYEXEC_HOME/images, findDaemon checks).
				dr := daemonRun{env: env, home: home, via: via, rungName: rungName, noStore: noStore, contentCap: cc,
					live: live, note: note, quiet: quiet, image: imageRef}
				if policyFile != "" {
					dr.pol = &pol
				}
				if d, err = dr.run(cmd.Context(), spec); err != nil {
					return daemonImageErr(env, code, err)
				}
			}
			if d == nil && imageRef != "" {
				var release func()
				if spec, release, err = useImage(cmd.Context(), env, imageRef, spec); err != nil {
					return imageErr(env, code, err)
				}
				defer release()
			}
			if d == nil {
				if d, st, err = runLocal(cmd.Context(), env, home, rungName, pol, engine, spec, noStore, contentCap != "", cc, live, note); err != nil {
					return err
				}
				if !noStore {
					defer autoGC(st)
				}
			}
			if !noStore {
				note.set("trial %s ran and is stored, pending (dryexec show %s | dryexec commit %s | dryexec discard %s); the host is unchanged", d.TrialID, d.TrialID, d.TrialID, d.TrialID)
			} else {
				note.set("trial %s ran; it was not stored (--no-store) and the host is unchanged", d.TrialID)
			}
			if asJSON {
				err = printJSON(env.Stdout, d)
			} else {
				// Buffered: the summary is a line per file, and a line per
				// write(2) made a million-file summary take minutes.
				bw := bufio.NewWriterSize(env.Stdout, 64<<10)
				// Not stored, the trial has no commit or discard to offer.
				err = render.Summary(bw, d, render.Options{Color: isTerminal(env.Stdout, env), OutputShown: live != nil, NoCommands: noStore})
				if ferr := bw.Flush(); err == nil {
					err = ferr
				}
			}
			*code = runStatus(exitStatus, d)
			if err != nil || (!doCommitFlag && !interactive) {
				return err
			}
			if st == nil {
				// The daemon recorded the trial in this install's store
				// (findDaemon checked): commit it from there, as after a
				// trial that ran here.
				if st, err = startStore(env); err != nil {
					return err
				}
				defer autoGC(st)
			}
			if interactive {
				// A block is not offered: commit refuses it unless --force
				// says a person has decided.
				if !force && d.Decision.Choice == policy.Block {
					fmt.Fprintf(env.Stderr, "dryexec: not asking to commit %s: the decision is block (see its reasons; --force asks anyway)\n", d.TrialID)
					return nil
				}
				all, paths, err := askCommit(env, d)
				if err != nil || (!all && len(paths) == 0) {
					// Nothing committed: the trial is stored, as a plain
					// run leaves it.
					fmt.Fprintf(env.Stderr, "dryexec: nothing committed; %s is left pending (dryexec commit %s | dryexec discard %s)\n", d.TrialID, d.TrialID, d.TrialID)
					return err
				}
				return doCommit(cmd.Context(), env, note, st, d.TrialID, store.CommitOptions{Paths: paths, AllowBlocked: force})
			}
			// --commit applies only what the policy lets through without a
			// person, unless --force says a person has decided. A refusal
			// exits 1 (README): the trial stays stored for a later commit.
			if !force && d.Decision.Choice != policy.AutoCommit {
				fmt.Fprintf(env.Stderr, "dryexec: not committing %s: the decision is %s (see its reasons above; dryexec commit %s commits it anyway, or discard it)\n",
					d.TrialID, d.Decision.Choice, d.TrialID)
				*code = ExitRefused
				return nil
			}
			if asJSON {
				env.Stdout = env.Stderr // stdout holds only the delta
			}
			return doCommit(cmd.Context(), env, note, st, d.TrialID, store.CommitOptions{AllowBlocked: force})
		},
	}
	f := c.Flags()
	f.StringVar(&viaFlag, "via", "", "where the trial runs: auto (the daemon of this install if one answers, else in this process), daemon or local (default $DRYEXEC_VIA, else auto; docs/api.md)")
	f.StringVar(&rungName, "rung", "ns", "isolation rung: "+strings.Join(rung.Names(), ", ")+" or best")
	f.BoolVar(&asJSON, "json", false, "print the StateDelta as JSON")
	f.DurationVar(&timeout, "timeout", 0, "kill the command and everything it started after this long (0: none)")
	f.StringArrayVar(&setEnv, "env", nil, "NAME=VALUE sets a variable in the command's environment, NAME (or NAME*) passes the caller's through (repeatable); by default only "+strings.Join(dryexec.EnvAllowlist, ", ")+" are")
	f.StringArrayVar(&passEnv, "pass-env", nil, "pass the caller's variable NAME (or NAME*) through (repeatable), like --env NAME")
	f.StringVar(&memory, "memory", "", "memory limit of the whole sandbox, in bytes or with K, M, G (default: half the host's RAM; -1: none)")
	f.Int64Var(&pids, "pids", 0, fmt.Sprintf("processes and threads the sandbox may have (default %d; -1: no limit)", dryexec.DefaultPids))
	f.Float64Var(&cpus, "cpus", 0, "CPU quota in CPUs, e.g. 1.5 (default: none)")
	f.StringArrayVar(&masks, "mask", nil, "a host path the sandbox sees empty, absolute or ~/… (repeatable; added to the default credential paths)")
	f.BoolVar(&noDefaultMasks, "no-default-masks", false, "do not mask the default credential paths (~/.ssh, ~/.aws, …; docs/limits.md)")
	f.StringArrayVar(&netSpecs, "net", nil, "what the network reaches: none (default), mock:FILE, allow:HOST[:PORT][/PREFIX][,…]; repeat to combine (mocks, then allow rules, else blocked; docs/network.md)")
	f.BoolVarP(&quiet, "quiet", "q", false, "do not show the command's output as it runs (the summary shows its tail after)")
	f.BoolVar(&withStdin, "stdin", false, "pass dryexec's standard input to the command (default: /dev/null)")
	f.IntVar(&outputCap, "output-cap", dryexec.DefaultOutputCap, "bytes of stdout and of stderr kept (the tail)")
	f.Int64Var(&upperSize, "upper-size", dryexec.DefaultUpperSizeBytes, "bytes the trial may write in all")
	f.StringVar(&contentCap, "content-cap", "", fmt.Sprintf("bytes of file content the store keeps of this trial, K, M or G (default $DRYEXEC_TRIAL_CONTENT_CAP, else %d GiB; -1: no cap); a file past it is listed without its content", store.DefaultTrialBytes>>30))
	f.BoolVar(&noStore, "no-store", false, "do not keep the trial for a later commit")
	f.StringVarP(&cwd, "cwd", "C", "", "run in this directory (default: the current one; with --image, an absolute directory in the image, default its WorkingDir, else /)")
	f.StringVar(&imageRef, "image", "", "run on this OCI image's root filesystem instead of the host's (pulled into $DRYEXEC_HOME/images on first use; ns rung; the image's Env under --env's; commit needs --to DIR: docs/images.md)")
	f.StringVar(&policyFile, "policy", "", "decide with this policy file (YAML or JSON; default: the built-in policy, docs/decision.md)")
	f.BoolVar(&doCommitFlag, "commit", false, "commit the changes right after the run, if the decision is auto_commit")
	f.BoolVarP(&interactive, "interactive", "i", false, "show the summary, then ask what to commit")
	f.StringVar(&exitStatus, "exit-status", exitDecision, "what dryexec run exits with: decision (0 auto_commit, 3 review, 4 block, 5 the command failed) or command (the command's own status: 124 timed out, 128+N killed by signal N; the decision stays in the summary and --json)")
	f.BoolVar(&force, "force", false, "with --commit or -i: commit whatever the decision, block included (recorded with the trial)")
	return c
}

// runMemoryLimit is `dryexec run`'s soft heap limit (debug.SetMemoryLimit)
// when GOMEMLIMIT does not set one.
const runMemoryLimit = 128 << 20

// exitCode is `dryexec run`'s status for a trial that ran (docs/decision.md):
// the decision, with a failed command told apart from other reviews.
func exitCode(d *dryexec.StateDelta) int { return runStatus(exitDecision, d) }

// callerEnviron lists the caller's variables that env.Getenv agrees with, for
// --env NAME* patterns.
func callerEnviron(env Env) []string {
	var out []string
	for _, kv := range os.Environ() {
		if k, v, ok := strings.Cut(kv, "="); ok && env.Getenv(k) == v {
			out = append(out, kv)
		}
	}
	return out
}

// parseBytes reads a size: bytes, or a number with K, M, G (powers of 1024,
// an optional "i" and "B" after it); "" is 0 (the default), -1 no limit.
func parseBytes(s string) (int64, error) {
	if s == "" || s == "-1" {
		return map[string]int64{"": 0, "-1": -1}[s], nil
	}
	t := strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(s), "B"), "I")
	mult := int64(1)
	if n := len(t); n > 0 {
		switch t[n-1] {
		case 'K':
			mult, t = 1<<10, t[:n-1]
		case 'M':
			mult, t = 1<<20, t[:n-1]
		case 'G':
			mult, t = 1<<30, t[:n-1]
		}
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v <= 0 || v > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a size (want bytes, or a number with K, M or G)", s)
	}
	return v * mult, nil
}

// checkRunArgs checks `run`'s arguments that need no trial and returns the
// working directory, absolute. Every failure is a usage error that says what
// to do.
func checkRunArgs(rungName string, argv []string, cwd string, timeout time.Duration, outputCap int, upperSize int64) (string, error) {
	if rungName != "best" && !slices.Contains(rung.Names(), rungName) {
		return "", usageError{fmt.Errorf("--rung %q: unknown; choose one of %s, or best", rungName, strings.Join(rung.Names(), ", "))}
	}
	if len(argv) == 0 || argv[0] == "" {
		return "", usageError{errors.New("no command: give it after --, as in dryexec run -- make test")}
	}
	for _, a := range argv {
		if strings.ContainsRune(a, 0) {
			return "", usageError{errors.New("an argument of the command contains a NUL byte, which no program can receive")}
		}
	}
	if timeout < 0 {
		return "", usageError{fmt.Errorf("--timeout %s: must not be negative (0: no timeout)", timeout)}
	}
	if outputCap < 0 {
		return "", usageError{fmt.Errorf("--output-cap %d: must not be negative", outputCap)}
	}
	if upperSize < 0 {
		return "", usageError{fmt.Errorf("--upper-size %d: must not be negative (0: the default, %d)", upperSize, dryexec.DefaultUpperSizeBytes)}
	}
	if cwd == "" {
		wd, err := os.Getwd()
		if err != nil {
			return "", usageError{fmt.Errorf("the current directory cannot be read (%v): give one with -C DIR", err)}
		}
		cwd = wd
	}
	if strings.ContainsRune(cwd, 0) {
		return "", usageError{errors.New("-C: the directory name contains a NUL byte")}
	}
	abs, err := filepath.Abs(cwd)
	if err != nil {
		return "", usageError{fmt.Errorf("-C %s: %v", cwd, err)}
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		return "", usageError{fmt.Errorf("-C %s: not a directory on the host (%s); give an existing directory", cwd, statReason(err))}
	}
	return abs, nil
}

// statReason words a failed or successful stat of something that had to be a
// directory.
func statReason(err error) string {
	switch {
	case err == nil:
		return "it is not a directory"
	case errors.Is(err, os.ErrNotExist):
		return "it does not exist"
	case errors.Is(err, os.ErrPermission):
		return "permission denied"
	}
	return err.Error()
}

// checkNetSpecs parses the --net values as the rung will (netsim.AddSpec), so
// that a malformed or contradictory one is a usage error before any trial,
// and makes a mock file's path absolute (the rung reads it later, from its own
// working directory) after checking that it can be read.
func checkNetSpecs(ctx context.Context, specs []string, env Env) ([]string, error) {
	var nc netsim.Config
	out := make([]string, len(specs))
	for i, spec := range specs {
		if f, ok := strings.CutPrefix(spec, "mock:"); ok && f != "" {
			abs, err := filepath.Abs(f)
			if err != nil {
				return nil, usageError{fmt.Errorf("--net %s: %v", spec, err)}
			}
			fh, err := os.Open(abs)
			if err == nil {
				var fi os.FileInfo
				if fi, err = fh.Stat(); err == nil && fi.IsDir() {
					err = errors.New("it is a directory")
				}
				fh.Close()
			}
			if err != nil {
				return nil, usageError{fmt.Errorf("--net %s: the mock file cannot be read (%v); give a readable YAML or JSON file (docs/network.md)", spec, err)}
			}
			spec = "mock:" + abs
		}
		if err := nc.AddSpec(spec); err != nil {
			return nil, usageError{fmt.Errorf("--net: %w", err)}
		}
		out[i] = spec
	}
	rules, err := nc.Rules()
	if err != nil {
		return nil, usageError{fmt.Errorf("--net: %w", err)}
	}
	if err := checkDaemonReach(ctx, rules, env); err != nil {
		return nil, usageError{err}
	}
	return out, nil
}

// checkDaemonReach refuses rules that reach the TCP listener of a daemon of
// this install (`dryexec serve --listen`, which records its address in its
// state dir while it runs). A record left by a daemon that was killed counts
// only if something still answers there.
func checkDaemonReach(ctx context.Context, rules []netsim.Rule, env Env) error {
	home, err := dryexec.DefaultHome(env.Getenv)
	if err != nil {
		return nil // startStore reports it
	}
	listen := server.ReadListen(filepath.Join(home, "serve"))
	err = server.CheckReach(ctx, rules, listen, nil)
	if err == nil {
		return nil
	}
	addr := listen
	if ap, perr := netip.ParseAddrPort(listen); perr == nil && ap.Addr().IsUnspecified() {
		addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(int(ap.Port())))
	}
	c, derr := net.DialTimeout("tcp", addr, 200*time.Millisecond)
	if derr != nil {
		return nil // nobody listens: the record is stale
	}
	c.Close()
	return err
}
