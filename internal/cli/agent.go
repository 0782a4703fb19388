package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/agent"
	"github.com/dryexec/dryexec/policy"
	"github.com/dryexec/dryexec/render"
)

// agentCmd is `dryexec agent --task "…"`: the agent loop (docs/agent.md) with
// a live view of each step. Exit 0 when the run succeeded, 1 when it did not
// (the stop reason says why), 2 for usage (no model configured included).
func agentCmd(env Env, code *int) *cobra.Command {
	var (
		task, commitMode, cwd, rungName, policyFile string
		asJSON                                      bool
		maxTrials, maxTokens                        int
		timeout, trialTimeout                       time.Duration
		netSpecs                                    []string
	)
	c := &cobra.Command{
		Use:   "agent --task TASK [flags]",
		Short: "Let a model carry out TASK, one trial at a time, committing what the policy lets through",
		Args:  usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, _ []string) error {
			if strings.TrimSpace(task) == "" {
				return usageError{errors.New("--task is required: say what the agent should do")}
			}
			// What the caller could have got wrong is checked before the model
			// is asked anything: the same checks `run` makes.
			var err error
			if cwd, err = checkRunArgs(rungName, []string{"/bin/sh"}, cwd, trialTimeout, 0, 0); err != nil {
				return err
			}
			if policyFile != "" {
				pol, err := policy.Load(policyFile)
				if err == nil {
					_, err = policy.Compile(pol)
				}
				if err != nil {
					return usageError{err}
				}
			}
			mc, err := agent.ConfigFromEnv(env.Getenv)
			if err != nil {
				return usageError{err}
			}
			m, err := agent.NewModel(mc)
			if err != nil {
				return usageError{err}
			}
			live := env.Stdout
			if asJSON {
				live = env.Stderr // stdout holds only the result
			}
			ex := &cliExecutor{env: env, rung: rungName, policy: policyFile, net: netSpecs}
			cfg := agent.Config{Task: task, Cwd: cwd, MaxTrials: maxTrials, MaxTokens: maxTokens, Timeout: timeout,
				TrialTimeout: trialTimeout, Commit: agent.CommitMode(commitMode), OnStep: func(s agent.Step) { printStep(live, s) }}
			if cfg.Commit == agent.CommitApprove {
				in := bufio.NewReader(env.Stdin)
				cfg.Approve = func(_ context.Context, d *dryexec.StateDelta) bool { return askApprove(live, in, d) }
			}
			model := mc.Model
			if model == "" {
				model = "(the first the server lists)"
			}
			fmt.Fprintf(live, "dryexec agent: %s model %s at %s\n", mc.Provider, model, mc.BaseURL)
			res, err := agent.Run(cmd.Context(), cfg, m, ex)
			if err != nil {
				if errors.Is(err, agent.ErrBadConfig) {
					return usageError{err}
				}
				return err
			}
			fmt.Fprintf(live, "success: %v  trials: %d  committed: %v  stop: %s  tokens: %d\n",
				res.Success, res.TrialsConducted, res.Committed, res.StopReason, res.TokensUsed)
			if !res.Success {
				*code = ExitRefused
			}
			if asJSON {
				return printJSON(env.Stdout, res)
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&task, "task", "", "what the agent should do (required)")
	f.StringVar(&commitMode, "commit", "auto", "auto: commit auto_commit trials; approve: ask on stdin for each trial with changes; never: trials only")
	f.IntVar(&maxTrials, "max-trials", 8, "trials the agent may run")
	f.IntVar(&maxTokens, "max-tokens", 200_000, "model tokens the agent may spend (as the endpoint reports them, else estimated)")
	f.DurationVar(&timeout, "timeout", 10*time.Minute, "time the whole run may take")
	f.DurationVar(&trialTimeout, "trial-timeout", 2*time.Minute, "time one trial may take")
	f.StringVarP(&cwd, "cwd", "C", "", "the directory trials run in (default: the current one)")
	f.StringVar(&rungName, "rung", "ns", "isolation rung of the trials, as run --rung")
	f.StringVar(&policyFile, "policy", "", "decide the trials with this policy file, as run --policy")
	f.StringArrayVar(&netSpecs, "net", nil, "what the trials' network reaches, as run --net (repeatable)")
	f.BoolVar(&asJSON, "json", false, "print the result and its transcript as JSON (the live view goes to stderr)")
	return c
}

// cliExecutor runs each trial as `dryexec run --json` and commits it as
// `dryexec commit` in this process: the same checks, store, policy and
// receipts as a person's run, with nothing duplicated.
type cliExecutor struct {
	env    Env
	rung   string
	policy string
	net    []string
}

func (e *cliExecutor) sub(ctx context.Context, args []string) (int, []byte, string) {
	var out, errb bytes.Buffer
	sub := Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: e.env.Getenv}
	code := Run(ctx, args, sub)
	return code, out.Bytes(), strings.TrimSpace(errb.String())
}

func (e *cliExecutor) Trial(ctx context.Context, command, cwd string, timeout time.Duration) (*dryexec.StateDelta, error) {
	if strings.ContainsRune(command, 0) {
		return nil, fmt.Errorf("%w: the command contains a NUL byte", dryexec.ErrBadAction)
	}
	args := []string{"run", "--json", "--rung", e.rung, "-C", cwd, "--timeout", timeout.String()}
	if e.policy != "" {
		args = append(args, "--policy", e.policy)
	}
	for _, n := range e.net {
		args = append(args, "--net", n)
	}
	args = append(args, "--", "/bin/sh", "-c", command)
	code, out, stderr := e.sub(ctx, args)
	switch code {
	case 0, ExitReview, ExitBlock, ExitCommandFailed:
	case ExitUsage:
		return nil, fmt.Errorf("%w: %s", dryexec.ErrBadAction, stderr)
	default:
		return nil, fmt.Errorf("dryexec run exited %d: %s", code, stderr)
	}
	var d dryexec.StateDelta
	if err := json.Unmarshal(out, &d); err != nil {
		return nil, fmt.Errorf("reading the trial's delta: %w", err)
	}
	return &d, nil
}

func (e *cliExecutor) Commit(ctx context.Context, trialID string) error {
	code, _, stderr := e.sub(ctx, []string{"commit", trialID})
	if code != 0 {
		return fmt.Errorf("commit %s refused: %s", trialID, stderr)
	}
	return nil
}

// printStep is the live view of one step. Everything the model or the
// sandbox wrote (commands, reasons, texts, paths in reasons) goes through
// clean (render.Sanitize): a model's answer must not steer the terminal either.
func printStep(w io.Writer, s agent.Step) { printStepWith(w, s, render.Sanitize) }

func printStepWith(w io.Writer, s agent.Step, clean func(string) string) {
	switch s.Kind {
	case "trial":
		fmt.Fprintf(w, "[%d] $ %s", s.Index+1, clean(s.Command))
		if s.Reason != "" {
			fmt.Fprintf(w, "   # %s", clean(s.Reason))
		}
		fmt.Fprintln(w)
		if s.Error != "" {
			fmt.Fprintf(w, "    refused: %s\n", clean(s.Error))
			return
		}
		fmt.Fprintf(w, "    %s (risk %.2f) %s: exit %d, %d file(s) changed", s.Decision.Choice, s.Decision.RiskScore, s.TrialID, *s.ExitCode, s.FilesChanged)
		switch {
		case s.Committed:
			fmt.Fprint(w, " — committed")
		case s.CommitError != "":
			fmt.Fprintf(w, " — commit failed: %s", clean(s.CommitError))
		}
		fmt.Fprintln(w)
		for _, r := range s.Decision.Reasons {
			if !strings.HasPrefix(r, "info:") && !strings.HasPrefix(r, "risk:") {
				fmt.Fprintf(w, "      %s\n", clean(r))
			}
		}
	case "finish", "answer":
		fmt.Fprintf(w, "[%d] %s: %s\n", s.Index+1, s.Kind, clean(s.Text))
	case "refusal":
		fmt.Fprintf(w, "[%d] the model refused: %s\n", s.Index+1, clean(s.Text))
	default:
		fmt.Fprintf(w, "[%d] %s: %s\n", s.Index+1, s.Kind, clean(s.Error))
	}
}

func askApprove(w io.Writer, in *bufio.Reader, d *dryexec.StateDelta) bool {
	fmt.Fprintf(w, "    commit %s (%s, %d file(s))? [y/N] ", d.TrialID, d.Decision.Choice, d.NumFiles())
	line, _ := in.ReadString('\n')
	yes := strings.EqualFold(strings.TrimSpace(line), "y") || strings.EqualFold(strings.TrimSpace(line), "yes")
	if line == "" {
		fmt.Fprintln(w)
	}
	return yes
}
