package mcpserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/mcpserver"
	"github.com/dryexec/dryexec/netsim/tun"
	"github.com/dryexec/dryexec/rung/linuxns"
	"github.com/dryexec/dryexec/server"
	"github.com/dryexec/dryexec/store"
)

func requireNS(t *testing.T) {
	t.Helper()
	testreq.Need(t, testreq.NS, (&linuxns.Rung{}).Available(context.Background()))
}

// call invokes a tool and decodes its structured output into out.
func call(t *testing.T, s *mcp.ClientSession, name string, args map[string]any, out any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := s.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if r.IsError {
		t.Fatalf("%s: tool error: %s", name, text(r))
	}
	// The structured result is what the tool's output schema says (the
	// SDK's own check is not in the path: mcpserver registers raw handlers).
	tools, err := s.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tl := range tools.Tools {
		if tl.Name != name {
			continue
		}
		b, _ := json.Marshal(tl.OutputSchema)
		var sch jsonschema.Schema
		if err := json.Unmarshal(b, &sch); err != nil {
			t.Fatal(err)
		}
		res, err := sch.Resolve(nil)
		if err != nil {
			t.Fatalf("%s: output schema: %v", name, err)
		}
		var v any
		b, _ = json.Marshal(r.StructuredContent)
		json.Unmarshal(b, &v)
		if err := res.Validate(v); err != nil {
			t.Fatalf("%s: the result does not match the output schema: %v\n%s", name, err, b)
		}
	}
	if out != nil {
		b, _ := json.Marshal(r.StructuredContent)
		if err := json.Unmarshal(b, out); err != nil {
			t.Fatalf("%s: %v in %s", name, err, b)
		}
	}
	return r
}

func text(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// exercise runs every tool through a connected client.
func exercise(t *testing.T, s *mcp.ClientSession) {
	ctx := context.Background()
	tools, err := s.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, tl := range tools.Tools {
		names = append(names, tl.Name)
		if tl.InputSchema == nil || tl.OutputSchema == nil {
			t.Errorf("tool %s lacks a typed input or output schema", tl.Name)
		}
	}
	want := "commit_trial discard_trial run_trial session_close session_commit session_compare session_diff session_fork session_keep session_network session_open session_park session_parked session_python session_resume session_shell show_trial"
	if got := strings.Join(sortStrings(names), " "); got != want {
		t.Fatalf("tools: %s", got)
	}
	wd := t.TempDir()
	var tr mcpserver.TrialOut
	r := call(t, s, "run_trial", map[string]any{"command": "echo hi > a.txt; echo b > b.txt; echo done", "cwd": wd}, &tr)
	if tr.TrialID == "" || tr.FilesChanged != 2 || tr.Stdout != "done\n" || tr.Decision.Choice == "" || tr.Status != "pending" {
		t.Fatalf("run_trial: %+v", tr)
	}
	if !strings.Contains(text(r), "a.txt") || !strings.Contains(text(r), tr.TrialID) {
		t.Fatalf("run_trial summary: %s", text(r))
	}
	// What to do next is said in MCP tools, never in CLI commands.
	if !strings.Contains(text(r), `commit_trial {"trial_id": "`+tr.TrialID+`"}`) || strings.Contains(text(r), "dryexec commit") ||
		len(tr.Next) != 2 || !strings.HasPrefix(tr.Next[0], "commit_trial") || !strings.HasPrefix(tr.Next[1], "discard_trial") {
		t.Fatalf("run_trial next steps: %q\n%s", tr.Next, text(r))
	}
	if _, err := os.Stat(filepath.Join(wd, "a.txt")); !os.IsNotExist(err) {
		t.Fatal("run_trial changed the host")
	}
	var shown mcpserver.TrialOut
	call(t, s, "show_trial", map[string]any{"trial_id": tr.TrialID}, &shown)
	if shown.TrialID != tr.TrialID || len(shown.Files) != 2 {
		t.Fatalf("show_trial: %+v", shown)
	}
	var co mcpserver.CommitOut
	call(t, s, "commit_trial", map[string]any{"trial_id": tr.TrialID, "paths": []string{filepath.Join(wd, "a.txt")}}, &co)
	if len(co.Applied) != 1 {
		t.Fatalf("commit_trial: %+v", co)
	}
	if b, _ := os.ReadFile(filepath.Join(wd, "a.txt")); string(b) != "hi\n" {
		t.Fatalf("a.txt after commit: %q", b)
	}
	// The selective commit left b.txt: a commit of the trial applies it.
	var rest mcpserver.CommitOut
	call(t, s, "commit_trial", map[string]any{"trial_id": tr.TrialID}, &rest)
	if len(rest.Applied) != 1 || !strings.HasSuffix(rest.Applied[0], "b.txt") {
		t.Fatalf("commit_trial of the rest: %+v", rest)
	}
	// Errors are tool errors the agent can read, not protocol failures.
	bad, err := s.CallTool(ctx, &mcp.CallToolParams{Name: "commit_trial", Arguments: map[string]any{"trial_id": tr.TrialID}})
	if err != nil || !bad.IsError || !strings.Contains(text(bad), "already committed") {
		t.Fatalf("second commit: %v %+v", err, bad)
	}
	var tr2 mcpserver.TrialOut
	call(t, s, "run_trial", map[string]any{"argv": []string{"sh", "-c", "echo x > x"}, "cwd": wd}, &tr2)
	var dis mcpserver.DiscardOut
	call(t, s, "discard_trial", map[string]any{"trial_id": tr2.TrialID}, &dis)
	if !dis.Discarded {
		t.Fatalf("discard: %+v", dis)
	}
	// The network: nothing leaves, and the attempt is in the result (where
	// netsim can intercept: without a usable /dev/net/tun the sandbox has
	// loopback only).
	var tr3 mcpserver.TrialOut
	call(t, s, "run_trial", map[string]any{"command": "python3 -c 'import socket; socket.socket().connect_ex((\"203.0.113.9\", 80))'", "cwd": wd, "net": []string{"none"}}, &tr3)
	if tun.CheckTUN() == nil && (len(tr3.Network) == 0 || !strings.HasPrefix(tr3.Network[len(tr3.Network)-1], "blocked tcp") || !strings.Contains(tr3.Network[len(tr3.Network)-1], "203.0.113.9:80")) {
		t.Fatalf("run_trial network: %q", tr3.Network)
	}
	var so mcpserver.SessionOut
	seedDir := t.TempDir()
	call(t, s, "session_open", map[string]any{"rung": "ns", "seed_dir": seedDir}, &so)
	var sh mcpserver.ShellOut
	call(t, s, "session_shell", map[string]any{"session_id": so.SessionID, "command": "echo hello > h.txt; cat h.txt; echo e >&2"}, &sh)
	// The transcript merges the two pipes as their bytes arrive: either order.
	if sh.ExitCode != 0 || (sh.Transcript != "hello\ne\n" && sh.Transcript != "e\nhello\n") || sh.Stdout != "hello\n" || sh.Stderr != "e\n" {
		t.Fatalf("session_shell: %+v", sh)
	}
	var py mcpserver.PythonOut
	call(t, s, "session_python", map[string]any{"session_id": so.SessionID, "code": "open('h.txt').read().upper()"}, &py)
	if !py.OK || py.Transcript != "'HELLO\\n'\n" {
		t.Fatalf("session_python: %+v", py)
	}
	var df mcpserver.DiffOut
	call(t, s, "session_diff", map[string]any{"session_id": so.SessionID}, &df)
	if len(df.Writes) != 1 || df.Writes[0].Path != "h.txt" || df.Writes[0].Size != 6 || df.Writes[0].Text != "hello\n" {
		t.Fatalf("session_diff: %+v", df)
	}
	var nl mcpserver.NetworkOut
	call(t, s, "session_network", map[string]any{"session_id": so.SessionID}, &nl)
	if len(nl.Network) != 0 || nl.Next != 0 {
		t.Fatalf("session_network: %+v", nl)
	}
	var sc mcpserver.SessionCommitOut
	call(t, s, "session_commit", map[string]any{"session_id": so.SessionID}, &sc)
	if b, _ := os.ReadFile(filepath.Join(seedDir, "h.txt")); string(b) != "hello\n" || len(sc.Applied) != 1 {
		t.Fatalf("session_commit: %+v, h.txt %q", sc, b)
	}
	var cl mcpserver.SessionOut
	call(t, s, "session_close", map[string]any{"session_id": so.SessionID}, &cl)
	if !cl.Closed {
		t.Fatalf("session_close: %+v", cl)
	}
}

func sortStrings(s []string) []string {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s
}

// `dryexec mcp` over stdio, driven by the official Go SDK's client.
func TestMCPStdio(t *testing.T) {
	requireNS(t)
	cmd := exec.Command(os.Args[0], "mcp")
	cmd.Env = append(os.Environ(), "DRYEXEC_TEST_AS_CLI=1", "DRYEXEC_HOME="+t.TempDir())
	cmd.Stderr = os.Stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	s, err := client.Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	exercise(t, s)
}

// /mcp on the daemon (streamable HTTP over its unix socket).
func TestMCPHTTP(t *testing.T) {
	requireNS(t)
	svc := newService(t)
	sock := filepath.Join(t.TempDir(), "d.sock")
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- server.Serve(ctx, svc, server.ServeOptions{Socket: sock, Ready: func(a string) { ready <- a },
			Handler: server.HandlerOptions{MCP: mcpserver.HTTPHandler(svc, "test", "/", mcpserver.Options{AllowForce: true})}})
	}()
	<-ready
	defer func() { cancel(); <-done }()
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		return (&net.Dialer{}).DialContext(ctx, "unix", sock)
	}}}
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	s, err := client.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: "http://localhost/mcp", HTTPClient: hc}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	exercise(t, s)
}

// TestMCPBadInput: every mistake an agent can make is a tool error with a
// message that says what to do (never a protocol failure or a crash), found
// before any trial runs; a blocked trial's summary offers no commit command.
func TestMCPBadInput(t *testing.T) {
	requireNS(t)
	home, userHome := t.TempDir(), t.TempDir()
	if err := os.MkdirAll(filepath.Join(userHome, ".ssh"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(userHome, ".ssh", "id_ed25519"), []byte("PRIVATE KEY\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "mcp")
	cmd.Env = append(os.Environ(), "DRYEXEC_TEST_AS_CLI=1", "DRYEXEC_HOME="+home, "HOME="+userHome)
	cmd.Stderr = os.Stderr
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	s, err := client.Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	wd := t.TempDir()
	escaped := filepath.Join(t.TempDir(), "escaped")
	var tr mcpserver.TrialOut
	call(t, s, "run_trial", map[string]any{"command": "echo a > a", "cwd": wd}, &tr)
	for _, tc := range []struct {
		name string
		tool string
		args map[string]any
		want string
	}{
		{"net none then allow", "run_trial", map[string]any{"command": "true", "cwd": wd, "net": []string{"none", "allow:example.com:443"}}, "contradicts --net none"},
		{"net allow then none", "run_trial", map[string]any{"command": "true", "cwd": wd, "net": []string{"allow:example.com:443", "none"}}, "none contradicts"},
		{"session net none then allow", "session_open", map[string]any{"net": []string{"none", "allow:example.com:443"}}, "contradicts --net none"},
		{"loopback rule", "run_trial", map[string]any{"command": "true", "cwd": wd, "net": []string{"allow:127.0.0.1:8080"}}, "own loopback"},
		{"missing mock file", "run_trial", map[string]any{"command": "true", "cwd": wd, "net": []string{"mock:/nonexistent/m.yaml"}}, "mock file"},
		{"unknown rung", "run_trial", map[string]any{"command": "true", "cwd": wd, "rung": "nope"}, "unknown; choose one of"},
		{"session unknown rung", "session_open", map[string]any{"rung": "nope"}, "unknown; choose one of"},
		{"relative cwd", "run_trial", map[string]any{"command": "true", "cwd": "rel"}, "cwd"},
		{"missing cwd", "run_trial", map[string]any{"command": "true", "cwd": "/nonexistent/dir"}, "/nonexistent/dir"},
		{"negative timeout", "run_trial", map[string]any{"command": "true", "cwd": wd, "timeout_ms": -1}, "negative"},
		{"no command", "run_trial", map[string]any{"cwd": wd}, "give argv"},
		{"empty argv[0]", "run_trial", map[string]any{"argv": []string{""}, "cwd": wd}, "argv"},
		{"unknown trial", "show_trial", map[string]any{"trial_id": "tr_aaaaaaaaaaaaaaaaaaaa"}, "not found"},
		// The arguments' shape: sentences naming the argument, what it
		// must be and what came (the SDK's validator said `validating
		// "arguments": validating root: …`, or `<invalid reflect.Value>`).
		{"timeout a string", "run_trial", map[string]any{"command": "true", "cwd": wd, "timeout_ms": "abc"}, `argument "timeout_ms" must be an integer, not a string`},
		{"timeout null (what the Inspector CLI sends for abc)", "run_trial", map[string]any{"command": "true", "cwd": wd, "timeout_ms": nil}, `argument "timeout_ms" must be an integer, not null (leave it out for the default)`},
		{"timeout a fraction", "run_trial", map[string]any{"command": "true", "cwd": wd, "timeout_ms": 1.5}, `argument "timeout_ms" must be an integer, not a fraction`},
		{"timeout too big", "run_trial", map[string]any{"command": "true", "cwd": wd, "timeout_ms": 1e30}, `argument "timeout_ms" must be an integer`},
		{"argv a string", "run_trial", map[string]any{"argv": "ls -l", "cwd": wd}, `argument "argv" must be a list of strings, e.g. ["a", "b"], not a string`},
		{"argv and command", "run_trial", map[string]any{"argv": []string{"ls"}, "command": "ls", "cwd": wd}, "give argv (a list) or command (a shell line), not both"},
		{"unknown argument", "run_trial", map[string]any{"cmd": "ls", "cwd": wd}, `argument "cmd" is not one of this tool's arguments (argv, command, cwd, image, net, rung, timeout_ms)`},
		{"missing trial id", "show_trial", map[string]any{}, `argument "trial_id" is required: a string`},
		{"null trial id", "discard_trial", map[string]any{"trial_id": nil}, `argument "trial_id" is required and cannot be null`},
		{"force a string", "commit_trial", map[string]any{"trial_id": tr.TrialID, "force": "yes"}, `argument "force" must be true or false, not a string`},
		{"rung not in the enum", "run_trial", map[string]any{"command": "true", "cwd": wd, "rung": "seatbelt"}, `argument "rung" is "seatbelt": unknown; choose one of`},
		{"session rung seatbelt", "session_open", map[string]any{"rung": "seatbelt"}, `argument "rung" is "seatbelt": unknown; choose one of ns, gvisor, vm, best`},
		// The host rung would run the model's command on the host for real.
		{"host rung", "run_trial", map[string]any{"command": "echo escaped > " + escaped, "cwd": wd, "rung": "host"}, `argument "rung" is "host": unknown; choose one of`},
		{"session host rung", "session_open", map[string]any{"rung": "host", "seed_dir": wd}, `argument "rung" is "host": unknown; choose one of ns, gvisor, vm, best`},
		{"unknown session", "session_shell", map[string]any{"session_id": "se_aaaaaaaaaaaaaaaaaaaa", "command": "ls"}, "not found"},
		{"session negative timeout", "session_shell", map[string]any{"session_id": "se_aaaaaaaaaaaaaaaaaaaa", "command": "ls", "timeout_ms": -5}, `argument "timeout_ms" must not be negative`},
		{"seed dir relative", "session_open", map[string]any{"seed_dir": "src"}, `argument "seed_dir" is "src": want a clean absolute host directory`},
		{"seed dir missing", "session_open", map[string]any{"seed_dir": "/nonexistent/src"}, "not a directory on the host"},
		// A seed is copied from outside the sandbox: what the view masks
		// (credentials) or hides (dryexec's home, the receipt key) must not
		// come in that way.
		{"seed dir a credential dir", "session_open", map[string]any{"seed_dir": filepath.Join(userHome, ".ssh")}, "every sandbox's view hides"},
		{"seed dir holding one", "session_open", map[string]any{"seed_dir": userHome}, "every sandbox's view hides"},
		{"seed dir dryexec's home", "session_open", map[string]any{"seed_dir": home}, "every sandbox's view hides"},
		{"diff path escapes", "session_diff", map[string]any{"session_id": "se_aaaaaaaaaaaaaaaaaaaa", "paths": []string{"../x"}}, "without .."},
		{"commit unseeded unknown", "session_commit", map[string]any{"session_id": "se_aaaaaaaaaaaaaaaaaaaa"}, "not found"},
		{"session commit force not allowed", "session_commit", map[string]any{"session_id": "se_aaaaaaaaaaaaaaaaaaaa", "force": true}, "--allow-force"},
		{"session commit digest not hex", "session_commit", map[string]any{"session_id": "se_aaaaaaaaaaaaaaaaaaaa", "expect_digest": "sha256:abc"}, `argument "expect_digest" is "sha256:abc": want the 64 lower-case hex digits`},
		{"bad trial id", "commit_trial", map[string]any{"trial_id": "../../etc"}, "not a trial id"},
		{"commit path not in trial", "commit_trial", map[string]any{"trial_id": tr.TrialID, "paths": []string{filepath.Join(wd, "b")}}, "changed nothing at or beneath"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: tc.tool, Arguments: tc.args})
			if err != nil {
				t.Fatalf("a protocol failure: %v", err)
			}
			if !r.IsError || !strings.Contains(text(r), tc.want) {
				t.Fatalf("error %v, text %q; want a tool error with %q", r.IsError, text(r), tc.want)
			}
			for _, jargon := range []string{"reflect", "validating", "unmarshal", "json:"} {
				if strings.Contains(text(r), jargon) {
					t.Errorf("the message has %q: %s", jargon, text(r))
				}
			}
		})
	}
	if _, err := os.Stat(filepath.Join(wd, "a")); err == nil {
		t.Fatal("a refused commit changed the host")
	}
	if _, err := os.Stat(escaped); err == nil {
		t.Fatal("a run_trial on the host rung wrote on the host")
	}
	// Blocked: the summary offers discard, not commit.
	wd = t.TempDir()
	r := call(t, s, "run_trial", map[string]any{"command": "echo a > a; mkdir -p /etc/dryexec-mcp-block && echo x > /etc/dryexec-mcp-block/x", "cwd": wd}, &tr)
	if tr.Decision.Choice != "block" || strings.Contains(text(r), "commit_trial") || !strings.Contains(text(r), `discard_trial {"trial_id": "`+tr.TrialID+`"}`) ||
		len(tr.Next) != 1 || !strings.HasPrefix(tr.Next[0], "discard_trial") {
		t.Fatalf("blocked trial summary (%s): %s", tr.Decision.Choice, text(r))
	}
	// Its commit is refused until force says a person decided.
	bad, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: "commit_trial", Arguments: map[string]any{"trial_id": tr.TrialID}})
	if err != nil || !bad.IsError || !strings.Contains(text(bad), "block") {
		t.Fatalf("commit of a blocked trial: %v %s", err, text(bad))
	}
	// force is the operator's to allow: this server was started without
	// --allow-force, so the model's force changes nothing.
	bad, err = s.CallTool(context.Background(), &mcp.CallToolParams{Name: "commit_trial", Arguments: map[string]any{"trial_id": tr.TrialID, "force": true}})
	if err != nil || !bad.IsError || !strings.Contains(text(bad), "--allow-force") {
		t.Fatalf("forced commit without --allow-force: %v %s", err, text(bad))
	}
	if _, err := os.Stat(filepath.Join(wd, "a")); err == nil {
		t.Fatal("a force refused for want of --allow-force changed the host")
	}
	cmd = exec.Command(os.Args[0], "mcp", "--allow-force")
	cmd.Env = append(os.Environ(), "DRYEXEC_TEST_AS_CLI=1", "DRYEXEC_HOME="+home, "HOME="+userHome)
	cmd.Stderr = os.Stderr
	s, err = mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var co mcpserver.CommitOut
	call(t, s, "commit_trial", map[string]any{"trial_id": tr.TrialID, "paths": []string{filepath.Join(wd, "a")}, "force": true}, &co)
	if len(co.Applied) != 1 {
		t.Fatalf("forced commit: %+v", co)
	}
	// The override is recorded as the agent's, through MCP: not as the
	// user dryexec runs as, which is what a person's commit records.
	st, err := store.Open(home, 0)
	if err != nil {
		t.Fatal(err)
	}
	if state, err := st.StateOf(tr.TrialID); err != nil || state.Override == nil || !strings.HasPrefix(state.Override.By, "mcp, ") {
		t.Errorf("override recorded as %+v (%v), want by mcp", state.Override, err)
	}
}

// TestMCPProgress: a run_trial call that carries a progress token gets the
// command's output as progress notifications while it runs. The command
// prints "ready" and then sleeps for a minute; the client cancels the call
// when a notification brings "ready", so the call ends cancelled only if the
// output came live (else it would end, successful, after the sleep).
func TestMCPProgress(t *testing.T) {
	requireNS(t)
	cmd := exec.Command(os.Args[0], "mcp")
	cmd.Env = append(os.Environ(), "DRYEXEC_TEST_AS_CLI=1", "DRYEXEC_HOME="+t.TempDir())
	cmd.Stderr = os.Stderr
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var mu sync.Mutex
	var got []*mcp.ProgressNotificationParams
	client := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, &mcp.ClientOptions{
		ProgressNotificationHandler: func(_ context.Context, r *mcp.ProgressNotificationClientRequest) {
			mu.Lock()
			defer mu.Unlock()
			got = append(got, r.Params)
			if strings.Contains(r.Params.Message, "ready") {
				cancel()
			}
		}})
	s, err := client.Connect(context.Background(), &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	params := &mcp.CallToolParams{Name: "run_trial", Arguments: map[string]any{"command": "echo ready; sleep 60", "cwd": t.TempDir(), "timeout_ms": 120000}}
	params.SetProgressToken("tok-1")
	_, err = s.CallTool(ctx, params)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("the call ended with %v, not cancelled on the live output", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) == 0 || got[0].ProgressToken != "tok-1" || got[0].Message != "ready\n" || got[0].Progress != 6 {
		t.Errorf("progress notifications: %+v", got)
	}
	// Without a token, no notification (and the call completes as before).
	n := len(got)
	mu.Unlock()
	var tr mcpserver.TrialOut
	call(t, s, "run_trial", map[string]any{"command": "echo quiet", "cwd": t.TempDir()}, &tr)
	mu.Lock()
	if len(got) != n || tr.Stdout != "quiet\n" {
		t.Errorf("a call without a token: %d more notifications, stdout %q", len(got)-n, tr.Stdout)
	}
}

// TestMCPScriptedStdin: a client that writes its requests and closes stdin
// at once (a script: printf … | dryexec mcp) gets an answer to every
// request it sent, a trial's included, before dryexec mcp exits.
func TestMCPScriptedStdin(t *testing.T) {
	requireNS(t)
	wd := t.TempDir()
	reqs := []string{
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"script","version":"1"}}}`,
		`{"jsonrpc":"2.0","method":"notifications/initialized"}`,
		`{"jsonrpc":"2.0","id":2,"method":"tools/list"}`,
		`{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"run_trial","arguments":{"command":"echo hi","cwd":"` + wd + `"}}}`,
		`{"jsonrpc":"2.0","id":4,"method":"tools/call","params":{"name":"show_trial","arguments":{"trial_id":"tr_aaaaaaaaaaaaaaaaaaaa"}}}`,
	}
	for range 3 { // it used to lose replies some of the time
		cmd := exec.Command(os.Args[0], "mcp")
		cmd.Env = append(os.Environ(), "DRYEXEC_TEST_AS_CLI=1", "DRYEXEC_HOME="+t.TempDir())
		cmd.Stdin = strings.NewReader(strings.Join(reqs, "\n") + "\n")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("dryexec mcp: %v\n%s", err, stderr.String())
		}
		got := map[float64]bool{}
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			var m map[string]any
			if json.Unmarshal([]byte(l), &m) == nil {
				if id, ok := m["id"].(float64); ok {
					got[id] = true
				}
			}
		}
		for _, id := range []float64{1, 2, 3, 4} {
			if !got[id] {
				t.Errorf("no answer to request %v:\n%s\n%s", id, out, stderr.String())
			}
		}
	}
}
