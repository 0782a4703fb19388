package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dryexec/dryexec/agent"
	"github.com/dryexec/dryexec/agent/agenttest"
)

// agentCLI runs the CLI in-process with a private DRYEXEC_HOME and extra
// variables (the model's).
func agentCLI(t *testing.T, home string, extra map[string]string, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	env := map[string]string{"DRYEXEC_HOME": home, "PATH": "/usr/local/bin:/usr/bin:/bin", "NO_COLOR": "1"}
	for k, v := range extra {
		env[k] = v
	}
	code := Run(context.Background(), args, Env{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb,
		Getenv: func(k string) string { return env[k] }})
	return code, out.String(), errb.String()
}

func turnCall(name string, args map[string]any) agenttest.Turn {
	return agenttest.Turn{Calls: []agenttest.Call{{Name: name, Args: args}}}
}

// The whole loop with real trials: a command that fails is reviewed and not
// committed, the model corrects it, the corrected one is auto_commit and
// committed, and every trial in the transcript is a stored, signed trial.
func TestAgentRealTrials(t *testing.T) {
	requireNS(t)
	dir, home := t.TempDir(), t.TempDir()
	var told map[string]any
	srv := agenttest.New(agenttest.Turns(
		turnCall("run_trial", map[string]any{"command": "echo ok > out/report.txt", "reason": "write the report"}),
		func(r agenttest.Request) agenttest.Turn {
			told = r.LastResult()
			return turnCall("run_trial", map[string]any{"command": "mkdir -p out && echo ok > out/report.txt"})
		},
		turnCall("finish", map[string]any{"success": true, "summary": "report written"})))
	defer srv.Close()
	code, out, errs := agentCLI(t, home, srv.Env("anthropic"), "", "agent", "--json", "-C", dir, "--task", "write out/report.txt")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	var res agent.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if !res.Success || res.TrialsConducted != 2 || !res.Committed || res.StopReason != agent.StopDone {
		t.Fatalf("%+v", res)
	}
	if told["decision"].(map[string]any)["choice"] != "review" || !strings.Contains(told["stderr"].(string), "nonexistent") {
		t.Fatalf("the model was told %v", told)
	}
	b, err := os.ReadFile(filepath.Join(dir, "out/report.txt"))
	if err != nil || string(b) != "ok\n" {
		t.Fatalf("host file %q %v", b, err)
	}
	for i, want := range []string{"review", "auto_commit"} {
		s := res.Steps[i]
		if s.Kind != "trial" || s.Decision.Choice != want || s.Committed != (want == "auto_commit") {
			t.Fatalf("step %d: %+v", i, s)
		}
		if c, vout, verrs := agentCLI(t, home, nil, "", "verify", s.TrialID); c != 0 {
			t.Fatalf("verify %s: %d %s %s", s.TrialID, c, vout, verrs)
		}
	}
	// The live view went to stderr, a line per step.
	for _, want := range []string{"[1] $ echo ok > out/report.txt   # write the report", "review (risk", "auto_commit (risk", "— committed", "[3] finish: report written", "success: true  trials: 2"} {
		if !strings.Contains(errs, want) {
			t.Errorf("live view lacks %q:\n%s", want, errs)
		}
	}
}

func TestAgentBlockedAndRefused(t *testing.T) {
	requireNS(t)
	dir, home := t.TempDir(), t.TempDir()
	pol := filepath.Join(t.TempDir(), "policy.yaml")
	if err := os.WriteFile(pol, []byte("denied_mutation_targets: [\"**/secrets/**\"]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := agenttest.New(agenttest.Turns(
		turnCall("run_trial", map[string]any{"command": "mkdir -p secrets && echo k > secrets/key"}),
		turnCall("finish", map[string]any{"success": true})))
	defer srv.Close()
	code, out, errs := agentCLI(t, home, srv.Env("openai"), "", "agent", "-C", dir, "--policy", pol, "--task", "store the key")
	if code != ExitRefused || !strings.Contains(out, "block (risk") || !strings.Contains(out, "success: false") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	if _, err := os.Stat(filepath.Join(dir, "secrets")); !os.IsNotExist(err) {
		t.Fatalf("a blocked trial reached the host: %v", err)
	}
	// --commit approve asks on stdin; "n" leaves the host as it was.
	srv2 := agenttest.New(agenttest.Turns(turnCall("run_trial", map[string]any{"command": "echo x > a.txt"}),
		turnCall("finish", map[string]any{"success": true})))
	defer srv2.Close()
	code, out, _ = agentCLI(t, home, srv2.Env("openai"), "n\n", "agent", "-C", dir, "--commit", "approve", "--task", "write a.txt")
	if code != ExitRefused || !strings.Contains(out, "? [y/N]") {
		t.Fatalf("exit %d\n%s", code, out)
	}
	if _, err := os.Stat(filepath.Join(dir, "a.txt")); !os.IsNotExist(err) {
		t.Fatalf("a refused commit reached the host: %v", err)
	}
}

// What the model writes reaches the terminal escaped: an answer must not
// steer it (clear the screen, rewrite the line that says what was committed).
func TestAgentLiveViewEscaped(t *testing.T) {
	requireNS(t)
	dir, home := t.TempDir(), t.TempDir()
	srv := agenttest.New(agenttest.Turns(
		turnCall("run_trial", map[string]any{"command": "true # \x1b[2J", "reason": "\x1b]0;owned\x07"}),
		turnCall("finish", map[string]any{"success": true, "summary": "done\r\x1b[1Acommitted: everything"})))
	defer srv.Close()
	code, out, errs := agentCLI(t, home, srv.Env("openai"), "", "agent", "-C", dir, "--task", "x")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errs)
	}
	if strings.ContainsAny(out, "\x1b\x07\r") {
		t.Fatalf("control characters reached the terminal: %q", out)
	}
	if !strings.Contains(out, "true # ") || !strings.Contains(out, "committed: everything") {
		t.Fatalf("the text itself is gone: %q", out)
	}
}

func TestAgentUsage(t *testing.T) {
	home := t.TempDir()
	srv := agenttest.New(agenttest.Turns(agenttest.Turn{Hang: true}))
	defer srv.Close()
	hang := srv.Env("openai")
	hang["DRYEXEC_MODEL_TIMEOUT"] = "0.2"
	tcs := []struct {
		name string
		env  map[string]string
		args []string
		code int
		says string
	}{
		{"no model", nil, []string{"agent", "--task", "x"}, ExitUsage, "OPENAI_BASE_URL"},
		{"no task", srv.Env("openai"), []string{"agent"}, ExitUsage, "--task is required"},
		{"bad commit mode", srv.Env("openai"), []string{"agent", "--task", "x", "--commit", "yolo"}, ExitUsage, "commit mode"},
		{"bad cwd", srv.Env("openai"), []string{"agent", "--task", "x", "-C", "/nonexistent"}, ExitUsage, "not a directory"},
		{"model timeout", hang, []string{"agent", "--task", "x"}, ExitRefused, "stop: model_timeout"},
	}
	for _, tc := range tcs {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := agentCLI(t, home, tc.env, "", tc.args...)
			if code != tc.code || !strings.Contains(out+errs, tc.says) {
				t.Fatalf("exit %d, want %d saying %q\n%s\n%s", code, tc.code, tc.says, out, errs)
			}
		})
	}
}
