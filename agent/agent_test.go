package agent_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/agent"
	"github.com/dryexec/dryexec/agent/agenttest"
)

// decidingExec stands in for the rung in the loop's own tests (the real
// trials run in internal/cli's TestAgent*): it decides each command as the
// default policy would its trial — "false" fails (review), a command naming
// secrets/ is blocked, anything else writes one file (auto_commit) — and
// records what was committed.
type decidingExec struct {
	mu        sync.Mutex
	n         int
	committed []string
	commitErr error
}

func (e *decidingExec) Trial(ctx context.Context, cmd, cwd string, timeout time.Duration) (*dryexec.StateDelta, error) {
	if strings.ContainsRune(cmd, 0) {
		return nil, fmt.Errorf("%w: a NUL byte", dryexec.ErrBadAction)
	}
	e.mu.Lock()
	e.n++
	id := fmt.Sprintf("tr_%d", e.n)
	e.mu.Unlock()
	d := &dryexec.StateDelta{TrialID: id, Receipt: dryexec.Receipt{DeltaSHA256: "sha-" + id, Signature: "sig-" + id}}
	switch {
	case cmd == "false":
		d.Process.ExitCode = 1
		d.Decision = dryexec.Decision{Choice: "review", RiskScore: 0.3, Reasons: []string{"review: the command failed: exit code 1"}}
	case strings.Contains(cmd, "secrets/"):
		d.Files = []dryexec.FileChange{{Path: cwd + "/secrets/key", Op: dryexec.OpCreate, Size: 2}}
		d.Decision = dryexec.Decision{Choice: "block", RiskScore: 1, Reasons: []string{"block: touches a denied target"}}
	case cmd == "true":
		d.Decision = dryexec.Decision{Choice: "auto_commit"}
	default:
		d.Files = []dryexec.FileChange{{Path: cwd + "/out.txt", Op: dryexec.OpCreate, Size: 3}}
		d.Decision = dryexec.Decision{Choice: "auto_commit"}
	}
	return d, nil
}

func (e *decidingExec) Commit(ctx context.Context, id string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.commitErr != nil {
		return e.commitErr
	}
	e.committed = append(e.committed, id)
	return nil
}

func runLoop(t *testing.T, srv *agenttest.Server, api string, cfg agent.Config, ex agent.Executor) *agent.Result {
	t.Helper()
	env := srv.Env(api)
	mc, err := agent.ConfigFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Task == "" {
		cfg.Task = "write out.txt"
	}
	if cfg.Cwd == "" {
		cfg.Cwd = "/work"
	}
	m, err := agent.NewModel(mc)
	if err != nil {
		t.Fatal(err)
	}
	res, err := agent.Run(context.Background(), cfg, m, ex)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func call(name string, args any) agenttest.Turn {
	return agenttest.Turn{Calls: []agenttest.Call{{Name: name, Args: args}}}
}

func trial(cmd string) agenttest.Turn { return call("run_trial", map[string]any{"command": cmd}) }

var finishOK = call("finish", map[string]any{"success": true, "summary": "done"})

func TestSelfCorrects(t *testing.T) {
	for _, api := range []string{"openai", "anthropic"} {
		t.Run(api, func(t *testing.T) {
			var seen []map[string]any
			srv := agenttest.New(agenttest.Turns(trial("false"), func(r agenttest.Request) agenttest.Turn {
				seen = append(seen, r.LastResult())
				return trial("echo ok > out.txt")
			}, finishOK))
			defer srv.Close()
			ex := &decidingExec{}
			var live []agent.Step
			res := runLoop(t, srv, api, agent.Config{OnStep: func(s agent.Step) { live = append(live, s) }}, ex)
			if res.StopReason != agent.StopDone || !res.Success || res.TrialsConducted != 2 || !res.Committed {
				t.Fatalf("result %+v", res)
			}
			if dec := seen[0]["decision"].(map[string]any)["choice"]; dec != "review" || seen[0]["committed"] != false {
				t.Fatalf("the model was told %v", seen[0])
			}
			if fmt.Sprint(ex.committed) != "[tr_2]" {
				t.Fatalf("committed %v, want [tr_2]", ex.committed)
			}
			var kinds []string
			for _, s := range res.Steps {
				kinds = append(kinds, s.Kind)
			}
			if strings.Join(kinds, ",") != "trial,trial,finish" || len(live) != 3 {
				t.Fatalf("transcript %v, live %d", kinds, len(live))
			}
			if s := res.Steps[1]; s.TrialID != "tr_2" || s.Decision.Choice != "auto_commit" || s.Receipt.Signature != "sig-tr_2" || !s.Committed {
				t.Fatalf("step %+v", s)
			}
			if r := srv.Requests(); r[0].API != api {
				t.Fatalf("api %s", r[0].API)
			}
		})
	}
}

// Every way a model can fail the loop ends it with a reason, the transcript
// so far, and no success.
func TestFailurePaths(t *testing.T) {
	forever := func(turn agenttest.Turn) agenttest.Script {
		return func(int, agenttest.Request) (agenttest.Turn, bool) { return turn, true }
	}
	tcs := []struct {
		name     string
		script   agenttest.Script
		cfg      agent.Config
		api      string
		stop     string
		errHas   string
		trials   int
		success  bool
		requests int // 0: not checked
	}{
		{name: "not json", script: agenttest.Turns(call("run_trial", "{not json"), call("run_trial", "[1]"), call("rm_rf", map[string]any{}), call("run_trial", map[string]any{"command": " "})),
			stop: agent.StopMalformed, errHas: "3 unusable", requests: 3},
		{name: "finish without success", script: forever(call("finish", map[string]any{"summary": "?"})), stop: agent.StopMalformed, requests: 3},
		{name: "malformed then good", script: agenttest.Turns(call("run_trial", "{"), trial("echo x > out.txt"), finishOK), stop: agent.StopDone, trials: 1, success: true},
		{name: "refusal openai", script: agenttest.Turns(agenttest.Turn{Refusal: "I can't help with that."}), stop: agent.StopRefused},
		{name: "refusal anthropic", api: "anthropic", script: agenttest.Turns(agenttest.Turn{Refusal: "I can't help with that."}), stop: agent.StopRefused},
		{name: "http 500", script: agenttest.Turns(agenttest.Turn{Status: 500, Raw: "overloaded"}), stop: agent.StopModelError, errHas: "HTTP 500"},
		{name: "not the api's shape", script: agenttest.Turns(agenttest.Turn{Raw: `{"choices": []}`}), stop: agent.StopModelError, errHas: "choices[0]"},
		{name: "not json answer", script: agenttest.Turns(agenttest.Turn{Raw: `<html>`}), stop: agent.StopModelError, errHas: "not JSON"},
		{name: "anthropic no content", api: "anthropic", script: agenttest.Turns(agenttest.Turn{Raw: `{"type":"error"}`}), stop: agent.StopModelError, errHas: "content"},
		{name: "cut off", script: agenttest.Turns(agenttest.Turn{Text: "I will now", FinishReason: "length"}), stop: agent.StopModelError, errHas: "cut off"},
		{name: "hangs: loop deadline", script: agenttest.Turns(agenttest.Turn{Hang: true}), cfg: agent.Config{Timeout: 300 * time.Millisecond}, stop: agent.StopModelTimeout},
		{name: "never stops trying", script: forever(trial("true")), cfg: agent.Config{MaxTrials: 3}, stop: agent.StopMaxTrials, trials: 3, requests: 4},
		{name: "never stops talking", script: forever(agenttest.Turn{Calls: []agenttest.Call{{Name: "run_trial", Args: "{"}}, Tokens: 1000}), cfg: agent.Config{MaxTokens: 2500, MaxMalformed: 100}, stop: agent.StopMaxTokens, requests: 3},
		{name: "a good call resets the malformed count", script: agenttest.Turns(call("run_trial", "{"), call("run_trial", "{"), trial("true"), call("run_trial", "{"), call("run_trial", "{"), finishOK),
			stop: agent.StopDone, trials: 1, success: true},
		{name: "block is not success under never either", script: agenttest.Turns(trial("echo k > secrets/key"), finishOK), cfg: agent.Config{Commit: agent.CommitNever}, stop: agent.StopDone, trials: 1},
		{name: "block is not success", script: agenttest.Turns(trial("echo k > secrets/key"), finishOK), stop: agent.StopDone, trials: 1},
		{name: "gave up", script: agenttest.Turns(call("finish", map[string]any{"success": false})), stop: agent.StopGaveUp},
		{name: "plain answer", script: agenttest.Turns(trial("echo x > out.txt"), agenttest.Turn{Text: "All done."}), stop: agent.StopDone, trials: 1, success: true},
		{name: "bad command", script: agenttest.Turns(trial("a\x00b"), finishOK), stop: agent.StopDone, success: true},
	}
	for _, tc := range tcs {
		t.Run(tc.name, func(t *testing.T) {
			srv := agenttest.New(tc.script)
			defer srv.Close()
			api := tc.api
			if api == "" {
				api = "openai"
			}
			start := time.Now()
			res := runLoop(t, srv, api, tc.cfg, &decidingExec{})
			if res.StopReason != tc.stop || res.Success != tc.success || res.TrialsConducted != tc.trials {
				t.Fatalf("stop %q success %v trials %d (error %q), want %q %v %d", res.StopReason, res.Success, res.TrialsConducted, res.Error, tc.stop, tc.success, tc.trials)
			}
			if !strings.Contains(res.Error, tc.errHas) {
				t.Fatalf("error %q does not say %q", res.Error, tc.errHas)
			}
			if n := len(srv.Requests()); tc.requests != 0 && n != tc.requests {
				t.Fatalf("%d model requests, want %d", n, tc.requests)
			}
			if time.Since(start) > 20*time.Second {
				t.Fatalf("took %s", time.Since(start))
			}
		})
	}
}

func TestModelRequestTimeout(t *testing.T) {
	srv := agenttest.New(agenttest.Turns(agenttest.Turn{Hang: true}))
	defer srv.Close()
	env := srv.Env("openai")
	env["DRYEXEC_MODEL_TIMEOUT"] = "0.2"
	mc, err := agent.ConfigFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	m, _ := agent.NewModel(mc)
	res, err := agent.Run(context.Background(), agent.Config{Task: "x", Cwd: "/w"}, m, &decidingExec{})
	if err != nil || res.StopReason != agent.StopModelTimeout || !strings.Contains(res.Error, "did not answer within 200ms") {
		t.Fatalf("%v %+v", err, res)
	}
}

func TestCommitModes(t *testing.T) {
	tcs := []struct {
		mode      agent.CommitMode
		approve   bool
		committed bool
		success   bool
	}{
		{agent.CommitAuto, false, true, true},
		{agent.CommitNever, false, false, true},
		{agent.CommitApprove, false, false, false},
		{agent.CommitApprove, true, true, true},
	}
	for _, tc := range tcs {
		t.Run(fmt.Sprintf("%s/%v", tc.mode, tc.approve), func(t *testing.T) {
			srv := agenttest.New(agenttest.Turns(trial("echo x > out.txt"), finishOK))
			defer srv.Close()
			asked := 0
			cfg := agent.Config{Commit: tc.mode}
			if tc.mode == agent.CommitApprove {
				cfg.Approve = func(_ context.Context, d *dryexec.StateDelta) bool { asked++; return tc.approve }
			}
			ex := &decidingExec{}
			res := runLoop(t, srv, "openai", cfg, ex)
			if res.Committed != tc.committed || res.Success != tc.success || (len(ex.committed) == 1) != tc.committed {
				t.Fatalf("%+v committed %v", res, ex.committed)
			}
			if tc.mode == agent.CommitApprove && asked != 1 {
				t.Fatalf("approve asked %d times", asked)
			}
		})
	}
	// A commit that fails (the host changed) is told to the model, not a success.
	srv := agenttest.New(agenttest.Turns(trial("echo x > out.txt"), func(r agenttest.Request) agenttest.Turn {
		if r.LastResult()["commit_error"] == nil {
			return agenttest.Turn{Text: "the loop did not say the commit failed"}
		}
		return finishOK
	}))
	defer srv.Close()
	res := runLoop(t, srv, "openai", agent.Config{}, &decidingExec{commitErr: dryexec.ErrCommitConflict})
	if res.Committed || res.Success || res.Steps[0].CommitError == "" || res.Steps[1].Kind != "finish" {
		t.Fatalf("%+v", res)
	}
}

func TestConfigFromEnv(t *testing.T) {
	tcs := []struct {
		env                   map[string]string
		provider, base, model string
		err                   string
	}{
		{env: map[string]string{"OPENAI_BASE_URL": "http://127.0.0.1:1/v1"}, provider: "openai", base: "http://127.0.0.1:1/v1"},
		{env: map[string]string{"OPENAI_API_KEY": "k"}, provider: "openai", base: agent.OpenAIDefaultBase, model: agent.OpenAIDefaultModel},
		{env: map[string]string{"OPENAI_API_KEY": "k", "OPENAI_MODEL": "m", "DRYEXEC_MODEL": "d"}, provider: "openai", base: agent.OpenAIDefaultBase, model: "d"},
		{env: map[string]string{"OPENAI_BASE_URL": "http://a/v1", "DRYEXEC_OPENAI_BASE_URL": "http://b/v1"}, provider: "openai", base: "http://b/v1"},
		{env: map[string]string{"ANTHROPIC_API_KEY": "k"}, provider: "anthropic", base: agent.AnthropicDefaultBase, model: agent.AnthropicDefaultModel},
		{env: map[string]string{"ANTHROPIC_API_KEY": "k", "OPENAI_API_KEY": "o", "DRYEXEC_AGENT_PROVIDER": "anthropic", "ANTHROPIC_MODEL": "c"}, provider: "anthropic", base: agent.AnthropicDefaultBase, model: "c"},
		{env: map[string]string{}, err: "OPENAI_BASE_URL"},
		{env: map[string]string{"DRYEXEC_AGENT_PROVIDER": "anthropic"}, err: "ANTHROPIC_API_KEY"},
		{env: map[string]string{"DRYEXEC_AGENT_PROVIDER": "gpt"}, err: "openai or anthropic"},
		{env: map[string]string{"OPENAI_BASE_URL": "ftp://x"}, err: "http"},
		{env: map[string]string{"OPENAI_BASE_URL": "http://x", "DRYEXEC_MODEL_TIMEOUT": "soon"}, err: "DRYEXEC_MODEL_TIMEOUT"},
	}
	for _, tc := range tcs {
		t.Run(fmt.Sprint(tc.env), func(t *testing.T) {
			c, err := agent.ConfigFromEnv(func(k string) string { return tc.env[k] })
			if tc.err != "" {
				if !errors.Is(err, agent.ErrNoModel) || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want ErrNoModel saying %q", err, tc.err)
				}
				return
			}
			if err != nil || c.Provider != tc.provider || c.BaseURL != tc.base || c.Model != tc.model {
				t.Fatalf("%+v %v", c, err)
			}
		})
	}
}

// With no model named, a local OpenAI-compatible server's first listed model.
func TestListedModel(t *testing.T) {
	srv := agenttest.New(agenttest.Turns(finishOK))
	defer srv.Close()
	srv.Model = "qwen-local"
	m, _ := agent.NewModel(agent.ModelConfig{Provider: "openai", BaseURL: srv.URL + "/v1"})
	res, err := agent.Run(context.Background(), agent.Config{Task: "x", Cwd: "/w"}, m, &decidingExec{})
	if err != nil || !res.Success {
		t.Fatalf("%v %+v", err, res)
	}
	if got := srv.Requests()[0].Body["model"]; got != "qwen-local" {
		t.Fatalf("model %v", got)
	}
	// A server that lists no model gets the default name.
	srv2 := agenttest.New(agenttest.Turns(finishOK))
	defer srv2.Close()
	srv2.Model = ""
	m, _ = agent.NewModel(agent.ModelConfig{Provider: "openai", BaseURL: srv2.URL + "/v1"})
	if res, err := agent.Run(context.Background(), agent.Config{Task: "x", Cwd: "/w"}, m, &decidingExec{}); err != nil || !res.Success {
		t.Fatalf("%v %+v", err, res)
	}
	if got := srv2.Requests()[0].Body["model"]; got != agent.OpenAIDefaultModel {
		t.Fatalf("model %v", got)
	}
}

func TestBadConfig(t *testing.T) {
	m, _ := agent.NewModel(agent.ModelConfig{Provider: "openai", BaseURL: "http://127.0.0.1:1/v1", Model: "m"})
	for _, cfg := range []agent.Config{{Cwd: "/w"}, {Task: "x", Cwd: "rel"}, {Task: "x", Cwd: "/w", Commit: "yolo"},
		{Task: "x", Cwd: "/w", Commit: agent.CommitApprove}, {Task: "x", Cwd: "/w", MaxTrials: -1}} {
		if _, err := agent.Run(context.Background(), cfg, m, &decidingExec{}); !errors.Is(err, agent.ErrBadConfig) {
			t.Errorf("%+v: %v, want ErrBadConfig", cfg, err)
		}
	}
}
