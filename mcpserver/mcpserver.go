// Package mcpserver owns dryexec's MCP face: the tools an agent calls over the
// Model Context Protocol (stdio for `dryexec mcp`, streamable HTTP at /mcp on
// the daemon), each a thin typed wrapper over a server.Service, so that an MCP
// trial is stored, decided and committed exactly like one from the CLI or the
// HTTP API.
package mcpserver

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/render"
	"github.com/dryexec/dryexec/server"
)

// maxText bounds the stdout/stderr/transcript text a tool returns: an agent's
// context is small, and the full output stays in the stored trial.
const maxText = 16 << 10

// RunTrialIn is run_trial's input.
type RunTrialIn struct {
	Argv      []string `json:"argv,omitempty" jsonschema:"the command and its arguments, e.g. [\"make\", \"test\"]; or use command"`
	Command   string   `json:"command,omitempty" jsonschema:"a shell command line, run with /bin/sh -c; or use argv"`
	Cwd       string   `json:"cwd,omitempty" jsonschema:"absolute directory to run in (default: the server's working directory)"`
	TimeoutMS int64    `json:"timeout_ms,omitempty" jsonschema:"kill the command after this many milliseconds (0: none)"`
	Rung      string   `json:"rung,omitempty" jsonschema:"isolation rung: ns (default) or best"`
	Net       []string `json:"net,omitempty" jsonschema:"network: [\"none\"] (default: nothing leaves, every attempt logged), [\"mock:FILE\"] (answers from a mock or OpenAPI file), [\"allow:HOST[:PORT]\"] (forwarded for real and logged); combined, mocks first (docs/network.md)"`
}

// DecisionOut is the policy's verdict.
type DecisionOut struct {
	Choice    string   `json:"choice"`
	RiskScore float64  `json:"risk_score"`
	Reasons   []string `json:"reasons"`
}

// TrialOut summarises a trial.
type TrialOut struct {
	TrialID      string      `json:"trial_id"`
	Status       string      `json:"status"`
	ExitCode     int         `json:"exit_code"`
	TimedOut     bool        `json:"timed_out"`
	FilesChanged int         `json:"files_changed"`
	Files        []string    `json:"files" jsonschema:"op and path of each change"`
	Stdout       string      `json:"stdout"`
	Stderr       string      `json:"stderr"`
	Decision     DecisionOut `json:"decision"`
	Violations   int         `json:"violations"`
	Network      []string    `json:"network" jsonschema:"action (mocked, allowed, blocked), protocol and URL or host:port of each network attempt"`
}

// TrialIDIn names a stored trial.
type TrialIDIn struct {
	TrialID string `json:"trial_id" jsonschema:"the trial's id, tr_…"`
}

// CommitIn selects what to commit.
type CommitIn struct {
	TrialID string   `json:"trial_id" jsonschema:"the trial's id, tr_…"`
	Paths   []string `json:"paths,omitempty" jsonschema:"absolute paths to commit (a directory selects all beneath it); empty: everything"`
	Force   bool     `json:"force,omitempty" jsonschema:"a person decided: commit even a trial the policy blocked, and even where the host changed since the trial (never through a symlink)"`
}

// CommitOut lists what was applied.
type CommitOut struct {
	TrialID string   `json:"trial_id"`
	Applied []string `json:"applied"`
}

// DiscardOut confirms a discard.
type DiscardOut struct {
	TrialID   string `json:"trial_id"`
	Discarded bool   `json:"discarded"`
}

// SessionOpenIn opens a session.
type SessionOpenIn struct {
	Rung      string   `json:"rung,omitempty" jsonschema:"ns (default) or host (no isolation)"`
	Workspace string   `json:"workspace,omitempty" jsonschema:"where the workspace appears in the sandbox (default /workspace)"`
	Net       []string `json:"net,omitempty" jsonschema:"network: [\"none\"] (default: nothing leaves, every attempt logged), [\"mock:FILE\"] (answers from a mock or OpenAPI file), [\"allow:HOST[:PORT]\"] (forwarded for real and logged); combined, mocks first (docs/network.md)"`
}

// SessionIDIn names a live session.
type SessionIDIn struct {
	SessionID string `json:"session_id" jsonschema:"the session's id, se_…"`
}

// ShellIn runs a shell command in a session.
type ShellIn struct {
	SessionID string `json:"session_id" jsonschema:"the session's id, se_…"`
	Command   string `json:"command" jsonschema:"shell command; cwd and exported variables persist between calls"`
	TimeoutMS int64  `json:"timeout_ms,omitempty"`
}

// ShellOut is a shell exec's result.
type ShellOut struct {
	ExitCode   int    `json:"exit_code"`
	TimedOut   bool   `json:"timed_out"`
	Transcript string `json:"transcript"`
	Cwd        string `json:"cwd"`
}

// PythonIn runs Python in a session.
type PythonIn struct {
	SessionID string `json:"session_id" jsonschema:"the session's id, se_…"`
	Code      string `json:"code" jsonschema:"Python source; a trailing expression is echoed"`
	TimeoutMS int64  `json:"timeout_ms,omitempty"`
}

// PythonOut is a Python exec's result.
type PythonOut struct {
	OK         bool   `json:"ok"`
	TimedOut   bool   `json:"timed_out"`
	Transcript string `json:"transcript"`
	Error      string `json:"error,omitempty"`
}

// DiffIn asks for a session's diff.
type DiffIn struct {
	SessionID string `json:"session_id" jsonschema:"the session's id, se_…"`
	Rebase    bool   `json:"rebase,omitempty" jsonschema:"make the current state the new baseline"`
}

// DiffOut lists a session's changes (paths relative to the workspace).
type DiffOut struct {
	Writes  map[string]int    `json:"writes" jsonschema:"path → size in bytes"`
	Links   map[string]string `json:"links"`
	Deletes []string          `json:"deletes"`
	Modes   map[string]string `json:"modes" jsonschema:"path → octal mode"`
}

// SessionOut describes a session.
type SessionOut struct {
	SessionID string `json:"session_id"`
	Rung      string `json:"rung"`
	Workspace string `json:"workspace"`
	Closed    bool   `json:"closed,omitempty"`
}

// New returns an MCP server whose tools act on svc. cwd is the default
// directory of run_trial.
func New(svc *server.Service, version, cwd string) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "dryexec", Version: version}, nil)
	t := &tools{svc: svc, cwd: cwd}
	mcp.AddTool(s, &mcp.Tool{Name: "run_trial", Description: "Run a command in an ephemeral sandboxed trial against a copy-on-write view of the host. Nothing on the host changes; returns what the command would change (files, output, exit code) and the policy's decision. Commit or discard it afterwards by trial_id."}, t.runTrial)
	mcp.AddTool(s, &mcp.Tool{Name: "show_trial", Description: "Show a stored trial: its summary, changes and status."}, t.showTrial)
	mcp.AddTool(s, &mcp.Tool{Name: "commit_trial", Description: "Apply a trial's file changes to the host (all, or only the given paths). Refused if the host changed since the trial."}, t.commitTrial)
	mcp.AddTool(s, &mcp.Tool{Name: "discard_trial", Description: "Drop a trial without changing the host."}, t.discardTrial)
	mcp.AddTool(s, &mcp.Tool{Name: "session_open", Description: "Open a sandbox session over a workspace; shell and python calls share its files, cwd and environment until session_close."}, t.sessionOpen)
	mcp.AddTool(s, &mcp.Tool{Name: "session_shell", Description: "Run a shell command in a session."}, t.sessionShell)
	mcp.AddTool(s, &mcp.Tool{Name: "session_python", Description: "Run Python code in a session."}, t.sessionPython)
	mcp.AddTool(s, &mcp.Tool{Name: "session_diff", Description: "List a session's workspace changes since its baseline."}, t.sessionDiff)
	mcp.AddTool(s, &mcp.Tool{Name: "session_close", Description: "Close a session and drop its sandbox."}, t.sessionClose)
	return s
}

// HTTPHandler serves the same tools over streamable HTTP (mounted at /mcp by
// the daemon, behind its auth).
func HTTPHandler(svc *server.Service, version, cwd string) http.Handler {
	s := New(svc, version, cwd)
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{JSONResponse: true})
}

// Run serves the tools on in/out (newline-delimited JSON-RPC, as on stdio)
// until the client goes away or ctx ends.
func Run(ctx context.Context, svc *server.Service, version string, in io.Reader, out io.Writer) error {
	cwd, err := os.Getwd()
	if err != nil {
		return err
	}
	d := newDrain(ctx, in, out)
	return New(svc, version, cwd).Run(ctx, &mcp.IOTransport{Reader: io.NopCloser(d), Writer: nopWriteCloser{d}})
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

type tools struct {
	svc *server.Service
	cwd string
}

func clip(s string) string {
	if len(s) <= maxText {
		return s
	}
	return "…(" + fmt.Sprint(len(s)-maxText) + " bytes cut)…" + s[len(s)-maxText:]
}

func text(s string) *mcp.CallToolResult {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: s}}}
}

func summarize(d *dryexec.StateDelta, status string) (TrialOut, string) {
	out := TrialOut{TrialID: d.TrialID, Status: status, ExitCode: d.Process.ExitCode, TimedOut: d.Process.TimedOut,
		FilesChanged: d.Totals.FilesChanged, Files: []string{}, Stdout: clip(d.Process.Stdout), Stderr: clip(d.Process.Stderr),
		Decision: DecisionOut{Choice: d.Decision.Choice, RiskScore: d.Decision.RiskScore, Reasons: d.Decision.Reasons}, Violations: len(d.Violations)}
	if out.Decision.Reasons == nil {
		out.Decision.Reasons = []string{}
	}
	if err := d.EachFile(func(f *dryexec.FileChange) error {
		out.Files = append(out.Files, string(f.Op)+" "+f.Path)
		return nil
	}); err != nil {
		out.Files = append(out.Files, "(the rest could not be read: "+err.Error()+")")
	}
	out.Network = []string{}
	for _, n := range d.Network {
		where := n.URL
		if where == "" {
			where = net.JoinHostPort(n.Host, strconv.Itoa(n.Port))
		}
		out.Network = append(out.Network, strings.TrimSpace(n.Action+" "+n.Proto+" "+n.Method+" "+where))
	}
	var b bytes.Buffer
	render.Summary(&b, d, render.Options{Color: false})
	if d.Decision.Choice == "block" {
		// The policy forbids committing it: no commit command is offered.
		fmt.Fprintf(&b, "trial %s: %s, blocked by the policy (dryexec discard %s)\n", d.TrialID, status, d.TrialID)
	} else {
		fmt.Fprintf(&b, "trial %s: %s (dryexec commit %s | dryexec discard %s)\n", d.TrialID, status, d.TrialID, d.TrialID)
	}
	return out, clip(b.String())
}

// progressWriter sends what a running command writes as MCP progress
// notifications (notifications/progress with the request's progress token):
// one per chunk of output, its text as the message (a chunk of more than
// maxText bytes is cut to its tail), the progress the bytes of output so far.
// A client that sent no token gets none.
type progressWriter struct {
	ctx   context.Context
	req   *mcp.CallToolRequest
	token any
	mu    *sync.Mutex
	total *float64
}

func (p progressWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	*p.total += float64(len(b))
	// An error (the client went away) is the trial's to notice, not ours:
	// the output still goes into the delta.
	_ = p.req.Session.NotifyProgress(p.ctx, &mcp.ProgressNotificationParams{ProgressToken: p.token,
		Message: clip(strings.ToValidUTF8(string(b), "\ufffd")), Progress: *p.total})
	return len(b), nil
}

// progressHooks streams the trial's output to the client when its request
// asked for progress.
func progressHooks(ctx context.Context, req *mcp.CallToolRequest) server.TrialHooks {
	if req == nil || req.Session == nil || req.Params == nil || req.Params.GetProgressToken() == nil {
		return server.TrialHooks{}
	}
	w := progressWriter{ctx: ctx, req: req, token: req.Params.GetProgressToken(), mu: &sync.Mutex{}, total: new(float64)}
	return server.TrialHooks{Stdout: w, Stderr: w}
}

func (t *tools) runTrial(ctx context.Context, req *mcp.CallToolRequest, in RunTrialIn) (*mcp.CallToolResult, TrialOut, error) {
	argv := in.Argv
	switch {
	case len(argv) > 0 && in.Command != "":
		return nil, TrialOut{}, fmt.Errorf("give argv or command, not both")
	case in.Command != "":
		argv = []string{"/bin/sh", "-c", in.Command}
	case len(argv) == 0:
		return nil, TrialOut{}, fmt.Errorf("give argv (a list) or command (a shell line)")
	}
	cwd := in.Cwd
	if cwd == "" {
		cwd = t.cwd
	}
	d, err := t.svc.RunTrial(ctx, server.TrialRequest{Argv: argv, Cwd: cwd, TimeoutMS: in.TimeoutMS, Rung: in.Rung, Net: in.Net}, progressHooks(ctx, req))
	if err != nil {
		return nil, TrialOut{}, err
	}
	out, summary := summarize(d, "pending")
	return text(summary), out, nil
}

func (t *tools) showTrial(ctx context.Context, _ *mcp.CallToolRequest, in TrialIDIn) (*mcp.CallToolResult, TrialOut, error) {
	d, st, err := t.svc.Trial(in.TrialID)
	if err != nil {
		return nil, TrialOut{}, err
	}
	out, summary := summarize(d, st.Status)
	return text(summary), out, nil
}

func (t *tools) commitTrial(ctx context.Context, _ *mcp.CallToolRequest, in CommitIn) (*mcp.CallToolResult, CommitOut, error) {
	applied, err := t.svc.Commit(ctx, in.TrialID, server.CommitRequest{Paths: in.Paths, Force: in.Force})
	if err != nil {
		return nil, CommitOut{}, err
	}
	out := CommitOut{TrialID: in.TrialID, Applied: []string{}}
	for _, f := range applied {
		out.Applied = append(out.Applied, string(f.Op)+" "+f.Path)
	}
	return text(fmt.Sprintf("committed %s: %d change(s) applied\n%s", in.TrialID, len(applied), strings.Join(out.Applied, "\n"))), out, nil
}

func (t *tools) discardTrial(ctx context.Context, _ *mcp.CallToolRequest, in TrialIDIn) (*mcp.CallToolResult, DiscardOut, error) {
	if err := t.svc.Discard(in.TrialID); err != nil {
		return nil, DiscardOut{}, err
	}
	return text("discarded " + in.TrialID), DiscardOut{TrialID: in.TrialID, Discarded: true}, nil
}

func (t *tools) sessionOpen(ctx context.Context, _ *mcp.CallToolRequest, in SessionOpenIn) (*mcp.CallToolResult, SessionOut, error) {
	l, err := t.svc.OpenSession(ctx, server.SessionRequest{Rung: in.Rung, Workspace: in.Workspace, Net: in.Net})
	if err != nil {
		return nil, SessionOut{}, err
	}
	info := l.Info()
	out := SessionOut{SessionID: info.SessionID, Rung: info.Rung, Workspace: info.Workspace}
	return text(fmt.Sprintf("session %s open (%s rung, workspace %s)", out.SessionID, out.Rung, out.Workspace)), out, nil
}

func (t *tools) sessionShell(ctx context.Context, _ *mcp.CallToolRequest, in ShellIn) (*mcp.CallToolResult, ShellOut, error) {
	l, err := t.svc.Session(in.SessionID)
	if err != nil {
		return nil, ShellOut{}, err
	}
	r, err := l.Session.Shell(ctx, in.Command, time.Duration(in.TimeoutMS)*time.Millisecond)
	if err != nil {
		return nil, ShellOut{}, err
	}
	out := ShellOut{ExitCode: r.ExitCode, TimedOut: r.TimedOut, Transcript: clip(r.Transcript), Cwd: r.Cwd}
	return text(fmt.Sprintf("%s[exit %d, cwd %s]", out.Transcript, out.ExitCode, out.Cwd)), out, nil
}

func (t *tools) sessionPython(ctx context.Context, _ *mcp.CallToolRequest, in PythonIn) (*mcp.CallToolResult, PythonOut, error) {
	l, err := t.svc.Session(in.SessionID)
	if err != nil {
		return nil, PythonOut{}, err
	}
	r, err := l.Session.Python(ctx, in.Code, nil, time.Duration(in.TimeoutMS)*time.Millisecond)
	if err != nil {
		return nil, PythonOut{}, err
	}
	out := PythonOut{OK: r.OK, TimedOut: r.TimedOut, Transcript: clip(r.Transcript)}
	if r.Error != nil {
		out.Error = clip(r.Error.Type + ": " + r.Error.Message + "\n" + r.Error.Traceback)
	}
	return text(out.Transcript + out.Error), out, nil
}

func (t *tools) sessionDiff(ctx context.Context, _ *mcp.CallToolRequest, in DiffIn) (*mcp.CallToolResult, DiffOut, error) {
	l, err := t.svc.Session(in.SessionID)
	if err != nil {
		return nil, DiffOut{}, err
	}
	d, err := l.Session.Diff(ctx, in.Rebase)
	if err != nil {
		return nil, DiffOut{}, err
	}
	out := DiffOut{Writes: map[string]int{}, Links: d.Links, Deletes: d.Deletes, Modes: map[string]string{}}
	if out.Links == nil {
		out.Links = map[string]string{}
	}
	if out.Deletes == nil {
		out.Deletes = []string{}
	}
	var b strings.Builder
	for p, c := range d.Writes {
		out.Writes[p] = len(c)
		fmt.Fprintf(&b, "write %s (%d bytes)\n", p, len(c))
	}
	for p, m := range d.Modes {
		out.Modes[p] = fmt.Sprintf("%04o", m.Perm())
	}
	for _, p := range out.Deletes {
		fmt.Fprintf(&b, "delete %s\n", p)
	}
	if b.Len() == 0 {
		b.WriteString("no changes\n")
	}
	return text(b.String()), out, nil
}

func (t *tools) sessionClose(ctx context.Context, _ *mcp.CallToolRequest, in SessionIDIn) (*mcp.CallToolResult, SessionOut, error) {
	l, err := t.svc.Session(in.SessionID)
	if err != nil {
		return nil, SessionOut{}, err
	}
	info := l.Info()
	if err := t.svc.CloseSession(in.SessionID); err != nil {
		return nil, SessionOut{}, err
	}
	return text("closed " + in.SessionID), SessionOut{SessionID: info.SessionID, Rung: info.Rung, Workspace: info.Workspace, Closed: true}, nil
}
