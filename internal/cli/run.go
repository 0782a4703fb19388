package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/localrun"
	"github.com/dryexec/dryexec/internal/runflags"
	"github.com/dryexec/dryexec/netsim"
	"github.com/dryexec/dryexec/netsim/mockfile"
	"github.com/dryexec/dryexec/policy"
	"github.com/dryexec/dryexec/rung"
	"github.com/dryexec/dryexec/server"
	"github.com/dryexec/dryexec/store"
)

func runCmd(env Env, code *int, note *interruptNote) *cobra.Command {
	var (
		// the flags the local engine takes too (runflags)
		lf        runflags.Local
		rungName  string
		withStdin bool
		outputCap int
		upperSize int64
		// content the store keeps of this trial (docs/limits.md)
		contentCap string
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
			// The steps the local engine takes too are package localrun's
			// (its Main runs them in this order, for its flags alone).
			asJSON, noStore, cwd := lf.JSON, lf.NoStore, lf.Cwd
			localrun.LimitMemory(env)
			if err := localrun.CheckExitStatus(lf.ExitStatus); err != nil {
				return err
			}
			via, err := localrun.Via(lf.Via, env)
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
				if cwd, err = checkRunArgs(rungName, args, cwd, lf.Timeout, outputCap, upperSize); err != nil {
					return err
				}
			} else {
				// The cwd is the image's: checked in it, defaulted from it.
				if err := checkImageCwd(cwd); err != nil {
					return err
				}
				if _, err = checkRunArgs(rungName, args, "/", lf.Timeout, outputCap, upperSize); err != nil {
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
				if cc, err = localrun.ParseBytes(contentCap); err != nil {
					return usageError{fmt.Errorf("--content-cap: %w", err)}
				}
			}
			spec, err := localrun.NewSpec(env, args, cwd, lf.Timeout, lf.Env, lf.PassEnv, imageRef != "")
			if err != nil {
				return err
			}
			spec.OutputCap, spec.UpperSizeBytes = outputCap, upperSize
			spec.Limits = dryexec.Limits{Pids: pids, CPUs: cpus}
			spec.Masks, spec.NoDefaultMasks = masks, noDefaultMasks
			if spec.Limits.MemoryBytes, err = localrun.ParseBytes(memory); err != nil {
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
			live := localrun.Live(env, &spec, lf.Quiet, asJSON)
			spec.Net = netSpecs
			var d *dryexec.StateDelta
			var st *store.Store
			if via != localrun.ViaLocal {
				// On an image, the daemon pulls it into its store's cache
				// (this install's: $DRYEXEC_HOME/images, findDaemon checks).
				dr := daemonRun{env: env, home: home, via: via, rungName: rungName, noStore: noStore, contentCap: cc,
					live: live, note: note, quiet: lf.Quiet, image: imageRef}
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
				t := localrun.Trial{Home: home, Open: rung.Select, Rung: rungName, Policy: pol, Engine: engine,
					NoStore: noStore, CapSet: contentCap != "", Cap: cc, Live: live, Note: note}
				if d, st, err = t.Local(cmd.Context(), env, spec); err != nil {
					return err
				}
				if !noStore {
					defer localrun.AutoGC(st)
				}
			}
			err = localrun.Report(env, d, note, asJSON, live != nil, noStore)
			*code = localrun.Status(lf.ExitStatus, d)
			if err != nil || (!doCommitFlag && !interactive) {
				return err
			}
			if st == nil {
				// The daemon recorded the trial in this install's store
				// (findDaemon checked): commit it from there, as after a
				// trial that ran here.
				if st, err = localrun.StartStore(env); err != nil {
					return err
				}
				defer localrun.AutoGC(st)
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
	lf.Define(f)
	f.StringVar(&rungName, "rung", "ns", "isolation rung: "+strings.Join(rung.Names(), ", ")+" or best")
	f.StringVar(&memory, "memory", "", "memory limit of the whole sandbox, in bytes or with K, M, G (default: half the host's RAM; -1: none)")
	f.Int64Var(&pids, "pids", 0, fmt.Sprintf("processes and threads the sandbox may have (default %d; -1: no limit)", dryexec.DefaultPids))
	f.Float64Var(&cpus, "cpus", 0, "CPU quota in CPUs, e.g. 1.5 (default: none)")
	f.StringArrayVar(&masks, "mask", nil, "a host path the sandbox sees empty, absolute or ~/… (repeatable; added to the default credential paths)")
	f.BoolVar(&noDefaultMasks, "no-default-masks", false, "do not mask the default credential paths (~/.ssh, ~/.aws, …; docs/limits.md)")
	f.StringArrayVar(&netSpecs, "net", nil, "what the network reaches: none (default), mock:FILE, allow:HOST[:PORT][/PREFIX][,…]; repeat to combine (mocks, then allow rules, else blocked; docs/network.md)")
	f.BoolVar(&withStdin, "stdin", false, "pass dryexec's standard input to the command (default: /dev/null)")
	f.IntVar(&outputCap, "output-cap", dryexec.DefaultOutputCap, "bytes of stdout and of stderr kept (the tail)")
	f.Int64Var(&upperSize, "upper-size", dryexec.DefaultUpperSizeBytes, "bytes the trial may write in all")
	f.StringVar(&contentCap, "content-cap", "", fmt.Sprintf("bytes of file content the store keeps of this trial, K, M or G (default $DRYEXEC_TRIAL_CONTENT_CAP, else %d GiB; -1: no cap); a file past it is listed without its content", store.DefaultTrialBytes>>30))
	f.StringVar(&imageRef, "image", "", "run on this OCI image's root filesystem instead of the host's (pulled into $DRYEXEC_HOME/images on first use; ns rung; the image's Env under --env's; commit needs --to DIR: docs/images.md)")
	f.StringVar(&policyFile, "policy", "", "decide with this policy file (YAML or JSON; default: the built-in policy, docs/decision.md)")
	f.BoolVar(&doCommitFlag, "commit", false, "commit the changes right after the run, if the decision is auto_commit")
	f.BoolVarP(&interactive, "interactive", "i", false, "show the summary, then ask what to commit")
	f.BoolVar(&force, "force", false, "with --commit or -i: commit whatever the decision, block included (recorded with the trial)")
	return c
}

// exitCode is `dryexec run`'s status for a trial that ran (docs/decision.md):
// the decision, with a failed command told apart from other reviews.
func exitCode(d *dryexec.StateDelta) int { return localrun.Status(runflags.ExitDecision, d) }

// checkRunArgs checks `run`'s arguments that need no trial (the rung's
// name, then localrun.CheckArgs) and returns the working directory,
// absolute. Every failure is a usage error that says what to do.
func checkRunArgs(rungName string, argv []string, cwd string, timeout time.Duration, outputCap int, upperSize int64) (string, error) {
	if rungName != "best" && !slices.Contains(rung.Names(), rungName) {
		return "", usageError{fmt.Errorf("--rung %q: unknown; choose one of %s, or best", rungName, strings.Join(rung.Names(), ", "))}
	}
	return localrun.CheckArgs(argv, cwd, timeout, outputCap, upperSize)
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
	rules, err := mockfile.Rules(&nc)
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
