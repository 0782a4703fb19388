package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/policy"
	"github.com/dryexec/dryexec/receipt"
	"github.com/dryexec/dryexec/render"
	"github.com/dryexec/dryexec/rung"
	"github.com/dryexec/dryexec/store"
)

// defaultEnv is the allowlist of the caller's variables a trial sees. Everything
// else (tokens, keys, cloud credentials) stays out unless named with --pass-env or
// --env, because the command should not see it and the delta records the env.
var defaultEnv = []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "TZ", "TMPDIR", "COLORTERM", "NO_COLOR",
	"LC_ALL", "LC_CTYPE", "LC_MESSAGES", "LC_COLLATE", "LC_NUMERIC", "LC_TIME"}

func runCmd(env Env, code *int) *cobra.Command {
	var (
		rungName  string
		asJSON    bool
		timeout   time.Duration
		setEnv    []string
		passEnv   []string
		withStdin bool
		outputCap int
		upperSize int64
		noStore   bool
		cwd       string
		// --commit, -i and --force
		doCommitFlag, interactive, force bool
		policyFile                       string
	)
	c := &cobra.Command{
		Use:   "run [flags] -- CMD [ARG...]",
		Short: "Run CMD in a trial, print what it would change, change nothing",
		Args:  usage(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			// The policy is read first: a mistake in it is the caller's (exit 2)
			// and must not cost a trial.
			pol, err := policy.Default(), error(nil)
			if policyFile != "" {
				if pol, err = policy.Load(policyFile); err != nil {
					return usageError{err}
				}
			}
			engine, err := policy.Compile(pol)
			if err != nil {
				return usageError{err}
			}
			home, err := store.DefaultDir(env.Getenv)
			if err != nil {
				return err
			}
			r, err := rung.Select(cmd.Context(), rungName)
			if err != nil {
				return err
			}
			if cwd == "" {
				if cwd, err = os.Getwd(); err != nil {
					return err
				}
			}
			cwd, err = filepath.Abs(cwd)
			if err != nil {
				return err
			}
			a := dryexec.Action{Argv: args, Cwd: cwd, Env: map[string]string{}, TimeoutMS: timeout.Milliseconds()}
			for _, k := range defaultEnv {
				if v := env.Getenv(k); v != "" {
					a.Env[k] = v
				}
			}
			for _, k := range passEnv {
				if v := env.Getenv(k); v != "" {
					a.Env[k] = v
				}
			}
			for _, kv := range setEnv {
				k, v, ok := strings.Cut(kv, "=")
				if !ok || k == "" {
					return usageError{fmt.Errorf("--env %q: want KEY=VALUE", kv)}
				}
				a.Env[k] = v
			}
			a.Env["PWD"] = cwd
			spec := dryexec.TrialSpec{TrialID: dryexec.NewTrialID(), Action: a, OutputCap: outputCap, UpperSizeBytes: upperSize}
			if withStdin {
				spec.Stdin = env.Stdin
			}
			if noStore && (doCommitFlag || interactive) {
				return usageError{fmt.Errorf("--commit and -i need the trial stored; drop --no-store")}
			}
			var rec interface {
				Save(*dryexec.StateDelta) error
				Abort()
			}
			var st *store.Store
			if !noStore {
				if st, err = openStore(env); err != nil {
					return err
				}
				t, err := st.Begin(spec.TrialID)
				if err != nil {
					return err
				}
				spec.Blobs, rec = t, t
			}
			d, err := r.Trial(cmd.Context(), spec)
			if err == nil {
				err = decideAndSign(cmd.Context(), engine, home, d)
			}
			if err != nil {
				if rec != nil {
					rec.Abort()
				}
				return err
			}
			if rec != nil {
				if err := rec.Save(d); err != nil {
					return err
				}
			}
			if asJSON {
				err = printJSON(env.Stdout, d)
			} else {
				err = render.Summary(env.Stdout, d, render.Options{Color: isTerminal(env.Stdout, env)})
			}
			*code = exitCode(d)
			if err != nil || (!doCommitFlag && !interactive) {
				return err
			}
			if interactive {
				all, paths, err := askCommit(env, d)
				if err != nil || (!all && len(paths) == 0) {
					return err
				}
				return doCommit(cmd.Context(), env, st, d.TrialID, store.CommitOptions{Paths: paths})
			}
			// --commit applies only what the policy lets through without a
			// person, unless --force says a person has decided.
			if !force && d.Decision.Choice != policy.AutoCommit {
				fmt.Fprintf(env.Stderr, "dryexec: not committing %s: the decision is %s (see its reasons; --force commits anyway)\n", d.TrialID, d.Decision.Choice)
				return nil
			}
			if asJSON {
				env.Stdout = env.Stderr // stdout holds only the delta
			}
			return doCommit(cmd.Context(), env, st, d.TrialID, store.CommitOptions{})
		},
	}
	f := c.Flags()
	f.StringVar(&rungName, "rung", "ns", "isolation rung: "+strings.Join(rung.Names(), ", ")+" or best")
	f.BoolVar(&asJSON, "json", false, "print the StateDelta as JSON")
	f.DurationVar(&timeout, "timeout", 0, "kill the command and everything it started after this long (0: none)")
	f.StringArrayVar(&setEnv, "env", nil, "set KEY=VALUE in the command's environment (repeatable)")
	f.StringArrayVar(&passEnv, "pass-env", nil, "pass the caller's variable KEY through (repeatable); by default only "+strings.Join(defaultEnv, ", ")+" are")
	f.BoolVar(&withStdin, "stdin", false, "pass dryexec's standard input to the command (default: /dev/null)")
	f.IntVar(&outputCap, "output-cap", dryexec.DefaultOutputCap, "bytes of stdout and of stderr kept (the tail)")
	f.Int64Var(&upperSize, "upper-size", dryexec.DefaultUpperSizeBytes, "bytes the trial may write in all")
	f.BoolVar(&noStore, "no-store", false, "do not keep the trial for a later commit")
	f.StringVarP(&cwd, "cwd", "C", "", "run in this directory (default: the current one)")
	f.StringVar(&policyFile, "policy", "", "decide with this policy file (YAML or JSON; default: the built-in policy, docs/decision.md)")
	f.BoolVar(&doCommitFlag, "commit", false, "commit the changes right after the run, if the decision is auto_commit")
	f.BoolVarP(&interactive, "interactive", "i", false, "show the summary, then ask what to commit")
	f.BoolVar(&force, "force", false, "with --commit: commit whatever the decision")
	return c
}

// decideAndSign fills d's decision with engine's verdict and then its receipt,
// signed with the install's key kept in home (created on first use).
func decideAndSign(ctx context.Context, engine *policy.Engine, home string, d *dryexec.StateDelta) error {
	engine.Apply(ctx, d)
	signer, err := receipt.LoadOrCreate(home)
	if err != nil {
		return err
	}
	return signer.Sign(d)
}

// exitCode is `dryexec run`'s status for a trial that ran (docs/decision.md):
// the decision, with a failed command told apart from other reviews.
func exitCode(d *dryexec.StateDelta) int {
	switch d.Decision.Choice {
	case policy.AutoCommit:
		return 0
	case policy.Block:
		return ExitBlock
	}
	if d.Process.ExitCode != 0 || d.Process.TimedOut || d.Process.Signal != "" {
		return ExitCommandFailed
	}
	return ExitReview
}
