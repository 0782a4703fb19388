// Package agent is dryexec's agent loop: a model proposes a shell command,
// the command runs as a trial, the decision and a compact delta go back to
// the model, which corrects itself or stops; a trial's changes are committed
// when the decision allows it (or the caller approves). Bounded by trials,
// tokens and time; every step is kept in a transcript (docs/agent.md).
//
// The Python SDK's dry_exec.Agent is the same loop over the daemon's HTTP API.
package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/dryexec/dryexec"
)

// CommitMode says what the loop does with a trial's changes.
type CommitMode string

const (
	// CommitAuto commits auto_commit trials (and review ones Approve accepts).
	CommitAuto CommitMode = "auto"
	// CommitApprove asks Approve for every trial with changes.
	CommitApprove CommitMode = "approve"
	// CommitNever only runs trials.
	CommitNever CommitMode = "never"
)

// Stop reasons (Result.StopReason).
const (
	StopDone         = "done"          // the model ended the task
	StopGaveUp       = "gave_up"       // the model called finish with success false
	StopRefused      = "refused"       // the model refused
	StopMaxTrials    = "max_trials"    // the model asked for more trials than allowed
	StopMaxTokens    = "max_tokens"    // the token budget is spent
	StopTimeout      = "timeout"       // the loop's time is up
	StopMalformed    = "malformed"     // too many unusable tool calls in a row
	StopModelTimeout = "model_timeout" // a model request timed out
	StopModelError   = "model_error"   // the model endpoint failed
	StopTrialError   = "trial_error"   // a trial could not run
)

// ErrBadConfig: a Config the loop cannot run with.
var ErrBadConfig = errors.New("bad agent configuration")

// Executor runs trials and commits them: the CLI's runs them in process, the
// SDK's through the daemon.
type Executor interface {
	// Trial runs command with /bin/sh -c in cwd and returns its decided,
	// signed delta. An error wrapping dryexec.ErrBadAction is the command's
	// fault (told to the model); any other error ends the loop.
	Trial(ctx context.Context, command, cwd string, timeout time.Duration) (*dryexec.StateDelta, error)
	Commit(ctx context.Context, trialID string) error
}

// Config is one agent run.
type Config struct {
	Task string
	Cwd  string // absolute
	// Bounds: trials run, tokens spent (as the endpoint reports them, else
	// estimated), time in all. Zero: 8 trials, 200,000 tokens, 10 minutes.
	MaxTrials int
	MaxTokens int
	Timeout   time.Duration
	// TrialTimeout bounds one trial (zero: 2 minutes).
	TrialTimeout time.Duration
	Commit       CommitMode // zero: CommitAuto
	// Approve is asked about review trials under CommitAuto and every trial
	// with changes under CommitApprove; a block is never offered.
	Approve func(ctx context.Context, d *dryexec.StateDelta) bool
	// OnStep sees each step as it is recorded (the CLI's live view).
	OnStep func(Step)
	// MaxMalformed unusable tool calls in a row end the loop (zero: 3).
	MaxMalformed int
	// System replaces the system prompt.
	System string
}

// Step is one entry of the transcript. Kind is "trial", "finish", "answer"
// (a final answer without a tool call), "malformed", "refusal" or "error".
type Step struct {
	Index        int               `json:"index"`
	Kind         string            `json:"kind"`
	Command      string            `json:"command,omitempty"`
	Reason       string            `json:"reason,omitempty"`
	TrialID      string            `json:"trial_id,omitempty"`
	Decision     *dryexec.Decision `json:"decision,omitempty"`
	Receipt      *dryexec.Receipt  `json:"receipt,omitempty"`
	ExitCode     *int              `json:"exit_code,omitempty"`
	FilesChanged int               `json:"files_changed,omitempty"`
	Committed    bool              `json:"committed,omitempty"`
	CommitError  string            `json:"commit_error,omitempty"`
	Error        string            `json:"error,omitempty"`
	Text         string            `json:"text,omitempty"`
	// Delta is the trial's delta (not in the JSON: the trial id finds it).
	Delta *dryexec.StateDelta `json:"-"`
}

// Result is what a run did. Success: the model ended the task as done and
// its last trial left nothing failed, blocked or uncommitted.
type Result struct {
	Success         bool    `json:"success"`
	TrialsConducted int     `json:"trials_conducted"`
	Committed       bool    `json:"committed"`
	StopReason      string  `json:"stop_reason"`
	Summary         string  `json:"summary,omitempty"`
	Error           string  `json:"error,omitempty"`
	TokensUsed      int     `json:"tokens_used"`
	DurationMS      int64   `json:"duration_ms"`
	Steps           []*Step `json:"transcript"`
}

const systemPrompt = `You are an operator that carries out a task on a Linux host through dryexec.
You act only through tools. run_trial runs ONE shell command (/bin/sh -c) in an ephemeral trial: a
copy-on-write view of the host, no network. You get back what it did: exit code, output tails,
the files it would change, network attempts, and dryexec's decision (auto_commit, review or block)
with its reasons. %s
When a trial fails or is blocked, read why and propose a corrected command. Keep commands small
and idempotent. When the task is done (or cannot be done), call finish with success and a short
summary. Do not call finish before the changes you wanted are committed.`

var commitRules = map[CommitMode]string{
	CommitAuto:    "Changes of a trial decided auto_commit are committed to the host right away; review and block decisions are not (review may be approved by the caller).",
	CommitApprove: "A trial's changes are committed only when the caller approves them; a block never is.",
	CommitNever:   "Nothing is committed to the host in this run: trials only show what would happen.",
}

// Tools are the tools the model is offered.
func Tools() []Tool {
	return []Tool{
		{Name: "run_trial", Description: "Run one shell command in an ephemeral dryexec trial and get its StateDelta summary.",
			Schema: map[string]any{"type": "object", "properties": map[string]any{
				"command": map[string]any{"type": "string", "description": "the shell command, run with /bin/sh -c"},
				"reason":  map[string]any{"type": "string", "description": "why this command, in one line"}},
				"required": []string{"command"}}},
		{Name: "finish", Description: "End the task: success true if it is done, false if it cannot be done.",
			Schema: map[string]any{"type": "object", "properties": map[string]any{
				"success": map[string]any{"type": "boolean"}, "summary": map[string]any{"type": "string"}},
				"required": []string{"success"}}},
	}
}

func (c *Config) check() error {
	switch {
	case strings.TrimSpace(c.Task) == "":
		return fmt.Errorf("%w: the task is empty", ErrBadConfig)
	case !strings.HasPrefix(c.Cwd, "/"):
		return fmt.Errorf("%w: the working directory %q is not absolute", ErrBadConfig, c.Cwd)
	case c.MaxTrials < 0 || c.MaxTokens < 0 || c.Timeout < 0 || c.TrialTimeout < 0 || c.MaxMalformed < 0:
		return fmt.Errorf("%w: a bound is negative", ErrBadConfig)
	}
	if c.Commit == "" {
		c.Commit = CommitAuto
	}
	if _, ok := commitRules[c.Commit]; !ok {
		return fmt.Errorf("%w: commit mode %q: want auto, approve or never", ErrBadConfig, c.Commit)
	}
	if c.Commit == CommitApprove && c.Approve == nil {
		return fmt.Errorf("%w: commit mode approve needs an approver", ErrBadConfig)
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&c.MaxTrials, 8)
	def(&c.MaxTokens, 200_000)
	def(&c.MaxMalformed, 3)
	if c.Timeout == 0 {
		c.Timeout = 10 * time.Minute
	}
	if c.TrialTimeout == 0 {
		c.TrialTimeout = 2 * time.Minute
	}
	return nil
}

// Run runs the loop. The error is a configuration error (nothing ran);
// whatever happens once the loop runs ends it with a StopReason and the
// transcript so far.
func Run(ctx context.Context, cfg Config, m Model, ex Executor) (*Result, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	defer cancel()
	l := &loop{cfg: cfg, m: m, ex: ex, res: &Result{}, start: time.Now()}
	system := cfg.System
	if system == "" {
		system = fmt.Sprintf(systemPrompt, commitRules[cfg.Commit])
	}
	l.msgs = append(l.msgs, Message{Role: "user", Text: fmt.Sprintf("Task: %s\nWorking directory: %s\nYou may run up to %d trials.", cfg.Task, cfg.Cwd, cfg.MaxTrials)})
	return l.run(ctx, system), nil
}

type loop struct {
	cfg       Config
	m         Model
	ex        Executor
	res       *Result
	msgs      []Message
	start     time.Time
	malformed int
	lastTrial *Step
}

func (l *loop) step(s *Step) *Step {
	s.Index = len(l.res.Steps)
	l.res.Steps = append(l.res.Steps, s)
	if l.cfg.OnStep != nil {
		l.cfg.OnStep(*s)
	}
	return s
}

func (l *loop) stop(reason, errText string) *Result {
	l.res.StopReason = reason
	if errText != "" {
		l.res.Error = errText
		l.step(&Step{Kind: "error", Error: errText})
	}
	l.res.DurationMS = time.Since(l.start).Milliseconds()
	return l.res
}

// goodEnd: the last trial (if any) left nothing failed, blocked or
// uncommitted that this run would have committed.
func (l *loop) goodEnd() bool {
	t := l.lastTrial
	if t == nil {
		return true
	}
	if t.ExitCode == nil || *t.ExitCode != 0 || t.Error != "" || (t.Decision != nil && t.Decision.Choice == "block") {
		return false
	}
	return t.Committed || t.FilesChanged == 0 || l.cfg.Commit == CommitNever
}

func (l *loop) run(ctx context.Context, system string) *Result {
	tools := Tools()
	for {
		if ctx.Err() != nil {
			return l.stop(StopTimeout, fmt.Sprintf("the agent ran out of time (%s)", l.cfg.Timeout))
		}
		if l.res.TokensUsed >= l.cfg.MaxTokens {
			return l.stop(StopMaxTokens, fmt.Sprintf("the agent used %d tokens of %d", l.res.TokensUsed, l.cfg.MaxTokens))
		}
		r, err := l.m.Complete(ctx, system, l.msgs, tools)
		if err != nil {
			var me *ModelError
			if errors.As(err, &me) && me.Kind == "timeout" {
				return l.stop(StopModelTimeout, err.Error())
			}
			return l.stop(StopModelError, err.Error())
		}
		l.res.TokensUsed += max(r.Tokens, 0)
		if r.Refusal != "" {
			l.step(&Step{Kind: "refusal", Text: r.Refusal})
			l.res.Summary = r.Refusal
			return l.stop(StopRefused, "")
		}
		l.msgs = append(l.msgs, Message{Role: "assistant", Text: r.Text, ToolCalls: r.ToolCalls})
		if len(r.ToolCalls) == 0 {
			if r.StopReason == "length" || r.StopReason == "max_tokens" {
				return l.stop(StopModelError, fmt.Sprintf("the model's answer was cut off (%s) without a tool call", r.StopReason))
			}
			l.step(&Step{Kind: "answer", Text: r.Text})
			l.res.Summary = r.Text
			l.res.Success = l.goodEnd()
			return l.stop(StopDone, "")
		}
		if res := l.calls(ctx, r); res != nil {
			return res
		}
		if l.malformed >= l.cfg.MaxMalformed {
			return l.stop(StopMalformed, fmt.Sprintf("%d unusable tool calls in a row", l.malformed))
		}
	}
}

func (l *loop) reply(c ToolCall, v any, isErr bool) {
	text, ok := v.(string)
	if !ok {
		b, _ := json.Marshal(v)
		text = string(b)
	}
	l.msgs = append(l.msgs, Message{Role: "tool", ToolCallID: c.ID, Text: text, IsError: isErr})
}

func (l *loop) malformedCall(c ToolCall, why string) {
	l.malformed++
	l.step(&Step{Kind: "malformed", Error: why, Text: clip(c.Arguments, 500)})
	l.reply(c, map[string]string{"error": why + `; call run_trial with {"command": "..."} or finish with {"success": true|false, "summary": "..."}`}, true)
}

func (l *loop) calls(ctx context.Context, r Reply) *Result {
	for _, c := range r.ToolCalls {
		var args map[string]any
		if strings.TrimSpace(c.Arguments) == "" {
			args = map[string]any{}
		} else if err := json.Unmarshal([]byte(c.Arguments), &args); err != nil || args == nil {
			why := fmt.Sprintf("the arguments of %s are not a JSON object", orName(c.Name))
			if err != nil && !strings.HasPrefix(strings.TrimSpace(c.Arguments), "[") {
				why = fmt.Sprintf("the arguments of %s are not JSON (%v)", orName(c.Name), err)
			}
			l.malformedCall(c, why)
			continue
		}
		switch c.Name {
		case "finish":
			ok, isBool := args["success"].(bool)
			if !isBool {
				l.malformedCall(c, "finish needs success: true or false")
				continue
			}
			summary, _ := args["summary"].(string)
			if summary == "" {
				summary = r.Text
			}
			l.step(&Step{Kind: "finish", Text: summary})
			l.res.Summary = summary
			l.res.Success = ok && l.goodEnd()
			if ok {
				return l.stop(StopDone, "")
			}
			return l.stop(StopGaveUp, "")
		case "run_trial":
		default:
			l.malformedCall(c, fmt.Sprintf("there is no tool %q (the tools are run_trial and finish)", c.Name))
			continue
		}
		cmd, _ := args["command"].(string)
		if list, ok := args["command"].([]any); ok {
			cmd = shellJoin(list)
		}
		if strings.TrimSpace(cmd) == "" {
			l.malformedCall(c, "run_trial needs command: a non-empty shell command string")
			continue
		}
		if l.res.TrialsConducted >= l.cfg.MaxTrials {
			l.reply(c, map[string]string{"error": "the trial budget is spent"}, true)
			return l.stop(StopMaxTrials, fmt.Sprintf("the model asked for more than %d trials", l.cfg.MaxTrials))
		}
		l.malformed = 0
		reason, _ := args["reason"].(string)
		if res := l.trial(ctx, c, cmd, reason); res != nil {
			return res
		}
	}
	return nil
}

func orName(n string) string {
	if n == "" {
		return "the call"
	}
	return n
}

func shellJoin(list []any) string {
	var parts []string
	for _, a := range list {
		s, ok := a.(string)
		if !ok {
			return ""
		}
		parts = append(parts, "'"+strings.ReplaceAll(s, "'", `'\''`)+"'")
	}
	return strings.Join(parts, " ")
}

func (l *loop) trial(ctx context.Context, c ToolCall, cmd, reason string) *Result {
	timeout := l.cfg.TrialTimeout
	if dl, ok := ctx.Deadline(); ok {
		left := time.Until(dl)
		if left <= time.Second {
			return l.stop(StopTimeout, fmt.Sprintf("the agent ran out of time (%s)", l.cfg.Timeout))
		}
		timeout = min(timeout, left)
	}
	s := &Step{Kind: "trial", Command: cmd, Reason: reason}
	d, err := l.ex.Trial(ctx, cmd, l.cfg.Cwd, timeout)
	if err != nil {
		s.Error = err.Error()
		l.step(s)
		if errors.Is(err, dryexec.ErrBadAction) {
			// The command itself was refused (a NUL byte, …): the model's to fix.
			l.malformed++
			l.reply(c, map[string]string{"error": "dryexec refused the command: " + err.Error()}, true)
			return nil
		}
		if ctx.Err() != nil {
			return l.stop(StopTimeout, fmt.Sprintf("the agent ran out of time (%s) during a trial", l.cfg.Timeout))
		}
		return l.stop(StopTrialError, "the trial could not run: "+err.Error())
	}
	l.res.TrialsConducted++
	code := d.Process.ExitCode
	if d.Process.TimedOut && code == 0 {
		code = -1
	}
	dec, rec := d.Decision, d.Receipt
	s.TrialID, s.Decision, s.Receipt, s.ExitCode, s.Delta = d.TrialID, &dec, &rec, &code, d
	s.FilesChanged = d.NumFiles()
	if l.shouldCommit(ctx, d) {
		if err := l.ex.Commit(ctx, d.TrialID); err != nil {
			s.CommitError = err.Error()
		} else {
			s.Committed = true
			l.res.Committed = true
		}
	}
	l.lastTrial = l.step(s)
	note := ""
	if l.res.TrialsConducted >= l.cfg.MaxTrials {
		note = "that was the last trial this run allows: call finish now"
	}
	l.reply(c, Summary(d, s.Committed, s.CommitError, note), false)
	return nil
}

func (l *loop) shouldCommit(ctx context.Context, d *dryexec.StateDelta) bool {
	if d.NumFiles() == 0 || d.Decision.Choice == "block" || l.cfg.Commit == CommitNever {
		return false
	}
	if d.Process.ExitCode != 0 || d.Process.TimedOut || d.Process.Signal != "" {
		return false
	}
	if l.cfg.Commit == CommitAuto && d.Decision.Choice == "auto_commit" {
		return true
	}
	if l.cfg.Approve != nil && (l.cfg.Commit == CommitApprove || d.Decision.Choice == "review") {
		return l.cfg.Approve(ctx, d)
	}
	return false
}

// Summary is the compact view of a delta the model gets back.
func Summary(d *dryexec.StateDelta, committed bool, commitErr, note string) map[string]any {
	type file struct {
		Op   string `json:"op"`
		Path string `json:"path"`
		Size int64  `json:"size"`
	}
	var files []file
	n := 0
	_ = d.EachFile(func(f *dryexec.FileChange) error {
		n++
		if len(files) < 40 {
			files = append(files, file{string(f.Op), dryexec.QuotePath(f.Path), f.Size})
		}
		return nil
	})
	var nets []map[string]any
	for i, e := range d.Network {
		if i == 20 {
			break
		}
		u := e.URL
		if u == "" {
			u = e.Host
		}
		ev := map[string]any{"method": e.Method, "url": u, "status": e.Status, "action": e.Action}
		if e.SchemaBreach {
			ev["schema_breach"] = true
		}
		nets = append(nets, ev)
	}
	var viol []map[string]string
	for i, v := range d.Violations {
		if i == 10 {
			break
		}
		viol = append(viol, map[string]string{"kind": v.Kind, "detail": v.Detail})
	}
	reasons := d.Decision.Reasons
	if len(reasons) > 10 {
		reasons = reasons[:10]
	}
	out := map[string]any{
		"trial_id": d.TrialID, "exit_code": d.Process.ExitCode, "timed_out": d.Process.TimedOut,
		"stdout": tail(d.Process.Stdout, 2000), "stderr": tail(d.Process.Stderr, 2000),
		"files": files, "network": nets, "violations": viol,
		"decision":  map[string]any{"choice": d.Decision.Choice, "risk_score": d.Decision.RiskScore, "reasons": reasons},
		"committed": committed,
	}
	if n > len(files) {
		out["files_not_shown"] = n - len(files)
	}
	if commitErr != "" {
		out["commit_error"] = commitErr
	}
	if note != "" {
		out["note"] = note
	}
	return out
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
