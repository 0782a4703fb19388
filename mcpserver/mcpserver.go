// Package mcpserver owns dryexec's MCP face: the tools an agent calls over the
// Model Context Protocol (stdio for `dryexec mcp`, streamable HTTP at /mcp on
// the daemon), each a thin typed wrapper over a server.Service, so that an MCP
// trial is stored, decided and committed exactly like one from the CLI or the
// HTTP API.
package mcpserver

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/render"
	"github.com/dryexec/dryexec/rung"
	"github.com/dryexec/dryexec/server"
	"github.com/dryexec/dryexec/session"
)

// maxText bounds the stdout/stderr/transcript text a tool returns: an agent's
// context is small, and the full output stays in the stored trial.
const maxText = 16 << 10

// maxDiffText bounds the file contents one session_diff answer carries (each
// file is also cut at maxText): past it, files are listed without content and
// a call with paths gets them.
const maxDiffText = 64 << 10

// RunTrialIn is run_trial's input. Exactly one of Argv and Command: the
// schema's descriptions say so (a oneOf at the top of an input schema is
// refused by several model providers), and a call with both or neither is a
// tool error that says so.
type RunTrialIn struct {
	Argv      []string `json:"argv,omitempty" jsonschema:"the command and its arguments, run without a shell, e.g. [\"make\", \"test\"]. Give exactly one of argv and command"`
	Command   string   `json:"command,omitempty" jsonschema:"a shell command line, run with /bin/sh -c, e.g. \"make test && ls\". Give exactly one of argv and command"`
	Cwd       string   `json:"cwd,omitempty" jsonschema:"absolute directory to run in (default: the server's working directory)"`
	TimeoutMS int64    `json:"timeout_ms,omitempty" jsonschema:"kill the command after this many milliseconds (0 or absent: no limit)"`
	Rung      string   `json:"rung,omitempty" jsonschema:"isolation rung (default ns); best picks the strongest this host can run"`
	Net       []string `json:"net,omitempty" jsonschema:"network: [\"none\"] (the default: nothing leaves, every attempt logged), [\"mock:/abs/FILE\"] (answers from a mock or OpenAPI file), [\"allow:HOST[:PORT]\"] (forwarded for real and logged); mocks and rules may be combined, mocks first"`
	Image     string   `json:"image,omitempty" jsonschema:"run on this OCI image's root filesystem instead of the host's, e.g. \"python:3.12\" (pulled on first use); cwd is then a directory in the image (default its WorkingDir), the image's environment applies, and commit_trial needs to"`
}

// DecisionOut is the policy's verdict.
type DecisionOut struct {
	Choice    string   `json:"choice" jsonschema:"auto_commit, review or block"`
	RiskScore float64  `json:"risk_score"`
	Reasons   []string `json:"reasons"`
}

// TrialOut summarises a trial.
type TrialOut struct {
	TrialID      string      `json:"trial_id"`
	Status       string      `json:"status" jsonschema:"pending, partial, committed or discarded"`
	ExitCode     int         `json:"exit_code"`
	TimedOut     bool        `json:"timed_out"`
	FilesChanged int         `json:"files_changed"`
	Files        []string    `json:"files" jsonschema:"op and path of each change"`
	Stdout       string      `json:"stdout"`
	Stderr       string      `json:"stderr"`
	Decision     DecisionOut `json:"decision"`
	Violations   int         `json:"violations"`
	Network      []string    `json:"network" jsonschema:"action (mocked, allowed, blocked), protocol and URL or host:port of each network attempt"`
	Next         []string    `json:"next" jsonschema:"the tools to call next, with their arguments"`
}

// TrialIDIn names a stored trial.
type TrialIDIn struct {
	TrialID string `json:"trial_id" jsonschema:"the trial's id, tr_…, as run_trial returned it"`
}

// CommitIn selects what to commit.
type CommitIn struct {
	TrialID string   `json:"trial_id" jsonschema:"the trial's id, tr_…"`
	Paths   []string `json:"paths,omitempty" jsonschema:"absolute host paths to commit (a directory selects all beneath it); absent: everything"`
	Force   bool     `json:"force,omitempty" jsonschema:"only when a person decided: commit even a trial the policy blocked, and even where the host changed since the trial (never through a symlink); refused unless the server was started with --allow-force"`
	To      string   `json:"to,omitempty" jsonschema:"for a trial run on an image: the absolute host directory that receives what it changed beneath its cwd in the image (required for such a trial; nothing else of it is committable)"`
}

// CommitOut lists what was applied.
type CommitOut struct {
	TrialID string   `json:"trial_id"`
	Applied []string `json:"applied" jsonschema:"op and path of each change applied to the host"`
}

// DiscardOut confirms a discard.
type DiscardOut struct {
	TrialID   string `json:"trial_id"`
	Discarded bool   `json:"discarded"`
}

// SessionOpenIn opens a session.
type SessionOpenIn struct {
	Rung      string   `json:"rung,omitempty" jsonschema:"ns (the default: namespaces), gvisor (gVisor's kernel), vm (a microVM: seconds to start under emulation); best picks the strongest this host can run"`
	Workspace string   `json:"workspace,omitempty" jsonschema:"absolute path where the workspace appears in the sandbox (default /workspace)"`
	Image     string   `json:"image,omitempty" jsonschema:"open the session on this OCI image's root filesystem instead of the host's (pulled on first use); the workspace is mounted over it"`
	SeedDir   string   `json:"seed_dir,omitempty" jsonschema:"absolute host directory whose copy becomes the workspace (and its baseline); session_commit applies the session's changes back to it. Absent: the workspace starts empty"`
	Net       []string `json:"net,omitempty" jsonschema:"network: [\"none\"] (the default: nothing leaves, every attempt logged), [\"mock:/abs/FILE\"] (answers from a mock or OpenAPI file), [\"allow:HOST[:PORT]\"] (forwarded for real and logged); mocks and rules may be combined, mocks first"`
}

// SessionIDIn names a live session.
type SessionIDIn struct {
	SessionID string `json:"session_id" jsonschema:"the session's id, se_…, as session_open returned it"`
}

// ShellIn runs a shell command in a session.
type ShellIn struct {
	SessionID string `json:"session_id" jsonschema:"the session's id, se_…"`
	Command   string `json:"command" jsonschema:"shell command line; cwd and exported variables persist between calls"`
	TimeoutMS int64  `json:"timeout_ms,omitempty" jsonschema:"kill the command after this many milliseconds (0 or absent: no limit)"`
}

// ShellOut is a shell exec's result.
type ShellOut struct {
	ExitCode   int      `json:"exit_code"`
	TimedOut   bool     `json:"timed_out"`
	Transcript string   `json:"transcript" jsonschema:"stdout and stderr merged in the order they came"`
	Stdout     string   `json:"stdout"`
	Stderr     string   `json:"stderr"`
	Cwd        string   `json:"cwd" jsonschema:"the shell's directory after the command"`
	Network    []string `json:"network" jsonschema:"the network attempts of this command, as run_trial lists them"`
}

// PythonIn runs Python in a session.
type PythonIn struct {
	SessionID string `json:"session_id" jsonschema:"the session's id, se_…"`
	Code      string `json:"code" jsonschema:"Python source; a trailing expression is echoed; variables persist between calls"`
	TimeoutMS int64  `json:"timeout_ms,omitempty" jsonschema:"stop the code after this many milliseconds (0 or absent: no limit)"`
}

// PythonOut is a Python exec's result.
type PythonOut struct {
	OK         bool     `json:"ok"`
	TimedOut   bool     `json:"timed_out"`
	Transcript string   `json:"transcript"`
	Error      string   `json:"error,omitempty" jsonschema:"the exception, with its traceback"`
	Network    []string `json:"network" jsonschema:"the network attempts of this code, as run_trial lists them"`
}

// DiffIn asks for a session's diff.
type DiffIn struct {
	SessionID string   `json:"session_id" jsonschema:"the session's id, se_…"`
	Paths     []string `json:"paths,omitempty" jsonschema:"workspace-relative paths to show (a directory selects all beneath it); absent: everything"`
	Rebase    bool     `json:"rebase,omitempty" jsonschema:"afterwards make the current state the new baseline (later diffs and session_commit then start from it)"`
	Origin    bool     `json:"origin,omitempty" jsonschema:"a branch's changes since its parent's baseline at the fork, instead of since the fork"`
}

// DiffFile is one written file of a session diff.
type DiffFile struct {
	Path    string `json:"path" jsonschema:"relative to the workspace"`
	Size    int    `json:"size"`
	Mode    string `json:"mode" jsonschema:"octal permissions"`
	Text    string `json:"text,omitempty" jsonschema:"the content, when it is UTF-8 text"`
	Base64  string `json:"base64,omitempty" jsonschema:"the content, when it is not text"`
	Omitted string `json:"omitted,omitempty" jsonschema:"why the content is not here (ask again with paths)"`
}

// DiffOut lists a session's changes (paths relative to the workspace).
type DiffOut struct {
	Writes  []DiffFile        `json:"writes" jsonschema:"new or changed files with their content, sorted by path"`
	Links   map[string]string `json:"links" jsonschema:"path → target of each new or changed symlink"`
	Deletes []string          `json:"deletes"`
	Modes   map[string]string `json:"modes" jsonschema:"path → octal mode of each path whose permissions alone changed"`
	Digest  string            `json:"digest" jsonschema:"sha256 of exactly these changes (content included, even where omitted here): pass it as session_commit's expect_digest, with the same paths, to commit only this diff (not one shown with rebase or origin: session_commit commits the diff since the current baseline)"`
}

// SessionCommitIn applies a session's changes to the directory it was seeded from.
type SessionCommitIn struct {
	SessionID    string   `json:"session_id" jsonschema:"the session's id, se_…; it must have been opened with seed_dir"`
	Paths        []string `json:"paths,omitempty" jsonschema:"workspace-relative paths to commit (a directory selects all beneath it); absent: every change"`
	Force        bool     `json:"force,omitempty" jsonschema:"only when a person decided: commit even what the policy blocked, and over host files that changed since the session was seeded; refused unless the server was started with --allow-force"`
	ExpectDigest string   `json:"expect_digest,omitempty" jsonschema:"the digest of the session_diff that was reviewed (same paths): the commit is refused, changing nothing, unless its changes are exactly that diff's. Absent: whatever the workspace holds at commit time is committed"`
}

// SessionCommitOut is what session_commit applied, through which trial.
type SessionCommitOut struct {
	SessionID string      `json:"session_id"`
	TrialID   string      `json:"trial_id" jsonschema:"the trial that recorded the changes; show_trial shows it"`
	Decision  DecisionOut `json:"decision"`
	Applied   []string    `json:"applied" jsonschema:"op and absolute host path of each change applied"`
}

// NetworkIn asks for a session's network log.
type NetworkIn struct {
	SessionID string `json:"session_id" jsonschema:"the session's id, se_…"`
	After     int    `json:"after,omitempty" jsonschema:"skip the first this many events (the next of an earlier answer)"`
}

// NetworkOut is a session's network log.
type NetworkOut struct {
	Network []string `json:"network" jsonschema:"action (mocked, allowed, blocked), protocol and URL or host:port of each attempt"`
	Next    int      `json:"next" jsonschema:"pass as after to get only later events"`
}

// SessionOut describes a session.
type SessionOut struct {
	SessionID string   `json:"session_id"`
	Rung      string   `json:"rung"`
	Workspace string   `json:"workspace"`
	SeedDir   string   `json:"seed_dir,omitempty"`
	Closed    bool     `json:"closed,omitempty"`
	Warnings  []string `json:"warnings,omitempty"`
}

// instructions is what the server tells a client (and its model) at
// initialization: the workflow the tools are built for.
const instructions = `dryexec runs commands as trials: in a sandbox over a copy-on-write view of the host, so nothing on the host changes until a change is committed.
Trials: run_trial runs one command and answers what it would change (files, output, exit code, network attempts) with the policy's decision (auto_commit, review, block). Read it, then call commit_trial to apply the changes to the host (all, or some paths) or discard_trial to drop them. Never commit a trial that is blocked or that did something unintended; force is for a person's decision only. show_trial shows a stored trial again.
Sessions: for many steps in one sandbox, session_open (seed_dir copies a host directory in as the workspace), then session_shell and session_python (files, cwd and variables persist), session_diff to see the workspace's changes with their content and digest, session_network for network attempts, session_commit with that digest as expect_digest to apply exactly the reviewed changes to the seed directory (recorded and decided as a trial), and session_close at the end. To try alternatives, session_fork a session into branches (each starts from its state), work in each, session_compare them, and session_keep the one to keep: its changes become the parent's.
Network: nothing leaves a sandbox unless net allows it; every attempt is logged.`

func isHostRung(name string) bool { return name == "host" }

// Options are the operator's choices for an MCP server: what its client (a
// model) may not decide for itself.
type Options struct {
	// AllowForce lets the client's force through (commit_trial and
	// session_commit over a block or a host change). Off, force is
	// refused: the policy's block and the host-changed check are for a
	// person to override, and the client of an MCP server is a model,
	// whose tool calls many hosts approve without asking anyone.
	AllowForce bool
}

// ErrForceNotAllowed is returned by a commit asking for force from an MCP
// server started without Options.AllowForce.
var ErrForceNotAllowed = errors.New("force is not this MCP server's to grant")

// New returns an MCP server whose tools act on svc. cwd is the default
// directory of run_trial.
func New(svc *server.Service, version, cwd string, opts Options) *mcp.Server {
	s := mcp.NewServer(&mcp.Implementation{Name: "dryexec", Title: "dryexec: trials before changes", Version: version},
		&mcp.ServerOptions{Instructions: instructions})
	t := &tools{svc: svc, cwd: cwd, opts: opts, seeds: map[string]*seed{}}
	// The host rung isolates nothing: offered to the model, a run_trial or
	// session would run its command on the host for real, with dryexec's
	// own state (the receipt key, the store) in reach, under tools that
	// promise nothing changes. The model is whom the trial is for, so the
	// choice is not its to make: the CLI and the API still offer host.
	trialRungs := append(slices.DeleteFunc(rung.Built(), isHostRung), "best")
	sessionRungs := append(slices.DeleteFunc(session.Rungs(), isHostRung), "best")
	no, yes := new(bool), new(bool)
	*yes = true
	// Hints, per the MCP spec: readOnly (changes nothing), destructive
	// (may change or drop what cannot be had back), idempotent (a repeat
	// changes nothing more), openWorld (reaches outside: a sandboxed
	// command may, through net allow rules).
	addTool(s, toolSpec{tool: &mcp.Tool{Name: "run_trial", Title: "Run a command as a trial",
		Description: "Run a command in an ephemeral sandboxed trial against a copy-on-write view of the host. Nothing on the host changes: it returns what the command would change (files, output, exit code, network attempts) and the policy's decision. Then call commit_trial or discard_trial with its trial_id.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: false, DestructiveHint: no, IdempotentHint: false, OpenWorldHint: yes}},
		enums: map[string][]string{"rung": trialRungs}}, t.runTrial)
	addTool(s, toolSpec{tool: &mcp.Tool{Name: "show_trial", Title: "Show a stored trial",
		Description: "Show a stored trial again: its changes, output, decision and status (pending, partial, committed, discarded).",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: no}}}, t.showTrial)
	addTool(s, toolSpec{tool: &mcp.Tool{Name: "commit_trial", Title: "Apply a trial's changes to the host",
		Description: "Apply a trial's file changes to the host (all, or only the given paths). Refused, changing nothing, if the host changed since the trial or the policy blocked it.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: yes, IdempotentHint: false, OpenWorldHint: no}}}, t.commitTrial)
	addTool(s, toolSpec{tool: &mcp.Tool{Name: "discard_trial", Title: "Drop a trial",
		Description: "Drop a stored trial and its recorded changes without changing the host.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: yes, IdempotentHint: true, OpenWorldHint: no}}}, t.discardTrial)
	addTool(s, toolSpec{tool: &mcp.Tool{Name: "session_open", Title: "Open a sandbox session",
		Description: "Open a sandbox session over a workspace (empty, or a copy of seed_dir); session_shell and session_python calls share its files, cwd and environment until session_close.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: no, OpenWorldHint: no}},
		enums: map[string][]string{"rung": sessionRungs}}, t.sessionOpen)
	addTool(s, toolSpec{tool: &mcp.Tool{Name: "session_shell", Title: "Run a shell command in a session",
		Description: "Run a shell command in a session; stdout and stderr come separately and merged, with the network attempts it made.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: no, OpenWorldHint: yes}}}, t.sessionShell)
	addTool(s, toolSpec{tool: &mcp.Tool{Name: "session_python", Title: "Run Python in a session",
		Description: "Run Python code in a session's interpreter; a trailing expression is echoed.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: no, OpenWorldHint: yes}}}, t.sessionPython)
	addTool(s, toolSpec{tool: &mcp.Tool{Name: "session_diff", Title: "Show a session's changes",
		Description: "List a session's workspace changes since its baseline, with each written file's content (text, or base64), and the digest of exactly these changes: pass it to session_commit as expect_digest so that only what was reviewed is committed.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: no, OpenWorldHint: no}}}, t.sessionDiff)
	addTool(s, toolSpec{tool: &mcp.Tool{Name: "session_network", Title: "Show a session's network log",
		Description: "List the network attempts the session's commands made (mocked, allowed or blocked).",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: no}}}, t.sessionNetwork)
	addTool(s, toolSpec{tool: &mcp.Tool{Name: "session_commit", Title: "Apply a session's changes to its seed directory",
		Description: "Apply a session's changes (all, or the given paths) to the host directory it was seeded from. They are recorded as a trial, decided by the policy and committed like commit_trial: refused, changing nothing, if the policy blocks them or the host changed since the seeding. Pass expect_digest, the digest of the session_diff that was reviewed (with the same paths): the commit is then refused, changing nothing, if the changes are no longer exactly those (a process still running in the session changed the workspace); without it, what the workspace holds at commit time is committed.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: yes, IdempotentHint: false, OpenWorldHint: no}}}, t.sessionCommit)
	addTool(s, toolSpec{tool: &mcp.Tool{Name: "session_fork", Title: "Fork a session into branches",
		Description: "Start n new sessions (branches) from a session's state now: its files exactly, the shell's cwd and exported environment, and the cache (not Python interpreter state). Each branch is a session of its own, its diff since the fork; the parent keeps running. Try alternatives in parallel, then session_compare and session_keep.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: no, OpenWorldHint: no}}}, t.sessionFork)
	addTool(s, toolSpec{tool: &mcp.Tool{Name: "session_keep", Title: "Keep one branch, discard the others",
		Description: "Make one branch's changes since the fork the parent session's (they win over the parent's own on the same paths), and close every branch of that fork. Then session_diff or session_commit the parent.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: yes, IdempotentHint: false, OpenWorldHint: no}}}, t.sessionKeep)
	addTool(s, toolSpec{tool: &mcp.Tool{Name: "session_compare", Title: "Compare branches side by side",
		Description: "Compare sessions' diffs (a branch's since its fork) or stored trials side by side: per path what each changed, whether alike, different, or only some changed it, and each one's decision.",
		Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true, IdempotentHint: true, OpenWorldHint: no}}}, t.sessionCompare)
	addTool(s, toolSpec{tool: &mcp.Tool{Name: "session_close", Title: "Close a session",
		Description: "Close a session and drop its sandbox, with whatever it did not commit.",
		Annotations: &mcp.ToolAnnotations{DestructiveHint: yes, IdempotentHint: false, OpenWorldHint: no}}}, t.sessionClose)
	addParkTools(s, t)
	return s
}

// HTTPHandler serves the same tools over streamable HTTP (mounted at /mcp by
// the daemon, behind its auth).
func HTTPHandler(svc *server.Service, version, cwd string, opts Options) http.Handler {
	s := New(svc, version, cwd, opts)
	return mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, &mcp.StreamableHTTPOptions{JSONResponse: true})
}

// Run serves the tools on in/out (newline-delimited JSON-RPC, as on stdio)
// until the client goes away or ctx ends.
func Run(ctx context.Context, svc *server.Service, version string, opts Options, in io.Reader, out io.Writer) error {
	cwd, err := os.Getwd()
	if err != nil {
		return err
	}
	d := newDrain(ctx, in, out)
	return New(svc, version, cwd, opts).Run(ctx, &mcp.IOTransport{Reader: io.NopCloser(d), Writer: nopWriteCloser{d}})
}

type nopWriteCloser struct{ io.Writer }

func (nopWriteCloser) Close() error { return nil }

type tools struct {
	svc  *server.Service
	cwd  string
	opts Options

	mu    sync.Mutex       // guards seeds
	seeds map[string]*seed // by session id: the sessions opened with seed_dir
}

func clip(s string) string {
	if len(s) <= maxText {
		return s
	}
	return "…(" + fmt.Sprint(len(s)-maxText) + " bytes cut)…" + s[len(s)-maxText:]
}

// netLines is each network event as one line: action, protocol, method and
// URL or host:port.
func netLines(evs []dryexec.NetworkEvent) []string {
	out := []string{}
	for _, n := range evs {
		where := n.URL
		if where == "" {
			where = net.JoinHostPort(n.Host, strconv.Itoa(n.Port))
		}
		out = append(out, strings.Join(strings.Fields(n.Action+" "+n.Proto+" "+n.Method+" "+where), " "))
	}
	return out
}

func decisionOut(d dryexec.Decision) DecisionOut {
	out := DecisionOut{Choice: d.Choice, RiskScore: d.RiskScore, Reasons: d.Reasons}
	if out.Reasons == nil {
		out.Reasons = []string{}
	}
	return out
}

// nextSteps names the MCP tools (never CLI commands: the agent has the tools,
// not a shell on the host) that act on a trial in its state.
func nextSteps(id, choice, status string) []string {
	arg := fmt.Sprintf(`{"trial_id": %q}`, id)
	switch {
	case status == "committed" || status == "discarded":
		return []string{}
	case choice == "block":
		// The policy forbids committing it: no commit is offered.
		return []string{"discard_trial " + arg}
	}
	return []string{"commit_trial " + arg + ` (or with "paths": [...] for some changes)`, "discard_trial " + arg}
}

func summarize(d *dryexec.StateDelta, status string) (TrialOut, string) {
	out := TrialOut{TrialID: d.TrialID, Status: status, ExitCode: d.Process.ExitCode, TimedOut: d.Process.TimedOut,
		FilesChanged: d.Totals.FilesChanged, Files: []string{}, Stdout: clip(d.Process.Stdout), Stderr: clip(d.Process.Stderr),
		Decision: decisionOut(d.Decision), Violations: len(d.Violations), Network: netLines(d.Network),
		Next: nextSteps(d.TrialID, d.Decision.Choice, status)}
	if err := d.EachFile(func(f *dryexec.FileChange) error {
		out.Files = append(out.Files, string(f.Op)+" "+f.Path)
		return nil
	}); err != nil {
		out.Files = append(out.Files, "(the rest could not be read: "+err.Error()+")")
	}
	var b bytes.Buffer
	render.Summary(&b, d, render.Options{Color: false, NoCommands: true})
	fmt.Fprintf(&b, "trial %s: %s", d.TrialID, status)
	if d.Decision.Choice == "block" {
		b.WriteString(", blocked by the policy")
	}
	if len(out.Next) > 0 {
		fmt.Fprintf(&b, "; next: %s", strings.Join(out.Next, " | "))
	}
	b.WriteString("\n")
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

func (t *tools) runTrial(ctx context.Context, req *mcp.CallToolRequest, in RunTrialIn) (string, TrialOut, error) {
	argv := in.Argv
	switch {
	case len(argv) > 0 && in.Command != "":
		return "", TrialOut{}, &ArgumentError{Tool: "run_trial", Msg: "give argv (a list) or command (a shell line), not both"}
	case in.Command != "":
		argv = []string{"/bin/sh", "-c", in.Command}
	case len(argv) == 0:
		return "", TrialOut{}, &ArgumentError{Tool: "run_trial", Msg: `give argv (a list, e.g. ["make", "test"]) or command (a shell line, e.g. "make test")`}
	}
	cwd := in.Cwd
	if cwd == "" && in.Image == "" {
		cwd = t.cwd
	}
	d, err := t.svc.RunTrial(ctx, server.TrialRequest{Argv: argv, Cwd: cwd, TimeoutMS: in.TimeoutMS, Rung: in.Rung, Net: in.Net, Image: in.Image}, progressHooks(ctx, req))
	if err != nil {
		return "", TrialOut{}, err
	}
	out, summary := summarize(d, "pending")
	return summary, out, nil
}

func (t *tools) showTrial(ctx context.Context, _ *mcp.CallToolRequest, in TrialIDIn) (string, TrialOut, error) {
	d, st, err := t.svc.Trial(in.TrialID)
	if err != nil {
		return "", TrialOut{}, err
	}
	out, summary := summarize(d, st.Status)
	return summary, out, nil
}

func (t *tools) commitTrial(ctx context.Context, _ *mcp.CallToolRequest, in CommitIn) (string, CommitOut, error) {
	if err := t.checkForce(in.Force, "dryexec commit --force "+in.TrialID); err != nil {
		return "", CommitOut{}, err
	}
	applied, err := t.svc.Commit(ctx, in.TrialID, server.CommitRequest{Paths: in.Paths, Force: in.Force, To: in.To, By: "mcp"})
	if err != nil {
		return "", CommitOut{}, err
	}
	out := CommitOut{TrialID: in.TrialID, Applied: changeLines(applied)}
	return fmt.Sprintf("committed %s: %d change(s) applied\n%s", in.TrialID, len(applied), strings.Join(out.Applied, "\n")), out, nil
}

// checkForce refuses force unless the operator allowed it; person says
// how a person can decide instead.
func (t *tools) checkForce(force bool, person string) error {
	if !force || t.opts.AllowForce {
		return nil
	}
	return fmt.Errorf("%w: it was started without --allow-force, so a block or a host change is for a person to override (%s); nothing was committed", ErrForceNotAllowed, person)
}

func changeLines(fs []dryexec.FileChange) []string {
	out := []string{}
	for _, f := range fs {
		out = append(out, string(f.Op)+" "+f.Path)
	}
	return out
}

func (t *tools) discardTrial(ctx context.Context, _ *mcp.CallToolRequest, in TrialIDIn) (string, DiscardOut, error) {
	if err := t.svc.Discard(in.TrialID); err != nil {
		return "", DiscardOut{}, err
	}
	return "discarded " + in.TrialID + "; the host is unchanged", DiscardOut{TrialID: in.TrialID, Discarded: true}, nil
}

func (t *tools) sessionOpen(ctx context.Context, _ *mcp.CallToolRequest, in SessionOpenIn) (string, SessionOut, error) {
	var sd *seed
	if in.SeedDir != "" {
		var err error
		// The snapshot comes first: a file that changes while it is copied
		// then differs from it, and session_commit refuses it (never the
		// other way round, a change overwritten unseen).
		if sd, err = snapshot(in.SeedDir); err != nil {
			return "", SessionOut{}, err
		}
		// The seed is copied from outside the sandbox, past its masks.
		if err := t.svc.CheckSeed(sd.dir); err != nil {
			return "", SessionOut{}, err
		}
	}
	l, err := t.svc.OpenSession(ctx, server.SessionRequest{Rung: in.Rung, Workspace: in.Workspace, Net: in.Net, Image: in.Image})
	if err != nil {
		return "", SessionOut{}, err
	}
	info := l.Info()
	out := SessionOut{SessionID: info.SessionID, Rung: info.Rung, Workspace: info.Workspace, SeedDir: in.SeedDir, Warnings: info.Warnings}
	if sd != nil {
		if err := l.Session.PushDir(ctx, sd.dir); err != nil {
			t.svc.CloseSession(info.SessionID)
			return "", SessionOut{}, fmt.Errorf("seeding the workspace from %s: %w", sd.dir, err)
		}
		// Sessions end without session_close too (idle, the API's DELETE,
		// a lost sandbox): their seeds go here, not to pile up in a daemon.
		// Sessions(), not Session(id), which would count as a use and keep
		// an idle session from being closed.
		live := map[string]bool{}
		for _, si := range t.svc.Sessions() {
			live[si.SessionID] = true
		}
		t.mu.Lock()
		for id := range t.seeds {
			if !live[id] {
				delete(t.seeds, id)
			}
		}
		t.seeds[info.SessionID] = sd
		t.mu.Unlock()
	}
	text := fmt.Sprintf("session %s open (%s rung, workspace %s", out.SessionID, out.Rung, out.Workspace)
	if sd != nil {
		text += ", a copy of " + sd.dir
	}
	text += fmt.Sprintf("); next: session_shell or session_python with {\"session_id\": %q}", out.SessionID)
	for _, w := range out.Warnings {
		text += "\nwarning: " + w
	}
	return text, out, nil
}

func (t *tools) sessionShell(ctx context.Context, _ *mcp.CallToolRequest, in ShellIn) (string, ShellOut, error) {
	if in.TimeoutMS < 0 {
		return "", ShellOut{}, &ArgumentError{Tool: "session_shell", Arg: "timeout_ms", Msg: "must not be negative"}
	}
	l, err := t.svc.Session(in.SessionID)
	if err != nil {
		return "", ShellOut{}, err
	}
	r, err := l.Session.Shell(ctx, in.Command, time.Duration(in.TimeoutMS)*time.Millisecond)
	if err != nil {
		return "", ShellOut{}, err
	}
	out := ShellOut{ExitCode: r.ExitCode, TimedOut: r.TimedOut, Transcript: clip(r.Transcript), Stdout: clip(r.Stdout), Stderr: clip(r.Stderr),
		Cwd: r.Cwd, Network: netLines(r.Network)}
	text := fmt.Sprintf("%s[exit %d, cwd %s]", out.Transcript, out.ExitCode, out.Cwd)
	if out.TimedOut {
		text += " (timed out)"
	}
	for _, n := range out.Network {
		text += "\nnetwork: " + n
	}
	return text, out, nil
}

func (t *tools) sessionPython(ctx context.Context, _ *mcp.CallToolRequest, in PythonIn) (string, PythonOut, error) {
	if in.TimeoutMS < 0 {
		return "", PythonOut{}, &ArgumentError{Tool: "session_python", Arg: "timeout_ms", Msg: "must not be negative"}
	}
	l, err := t.svc.Session(in.SessionID)
	if err != nil {
		return "", PythonOut{}, err
	}
	r, err := l.Session.Python(ctx, in.Code, nil, time.Duration(in.TimeoutMS)*time.Millisecond)
	if err != nil {
		return "", PythonOut{}, err
	}
	out := PythonOut{OK: r.OK, TimedOut: r.TimedOut, Transcript: clip(r.Transcript), Network: netLines(r.Network)}
	if r.Error != nil {
		out.Error = clip(r.Error.Type + ": " + r.Error.Message + "\n" + r.Error.Traceback)
	}
	text := out.Transcript + out.Error
	for _, n := range out.Network {
		text += "\nnetwork: " + n
	}
	return text, out, nil
}

// beneath says whether rel, a workspace-relative path, is one of sel or
// beneath one (everything when sel is empty).
func beneath(rel string, sel []string) bool {
	if len(sel) == 0 {
		return true
	}
	for _, s := range sel {
		s = strings.TrimSuffix(s, "/")
		if s == "." || rel == s || strings.HasPrefix(rel, s+"/") {
			return true
		}
	}
	return false
}

func checkRelPaths(tool string, paths []string) error {
	for _, p := range paths {
		if !filepath.IsLocal(strings.TrimSuffix(p, "/")) && p != "." {
			return &ArgumentError{Tool: tool, Arg: "paths", Msg: fmt.Sprintf("has %q: want paths relative to the workspace, without ..", p)}
		}
	}
	return nil
}

func (t *tools) sessionDiff(ctx context.Context, _ *mcp.CallToolRequest, in DiffIn) (string, DiffOut, error) {
	if err := checkRelPaths("session_diff", in.Paths); err != nil {
		return "", DiffOut{}, err
	}
	l, err := t.svc.Session(in.SessionID)
	if err != nil {
		return "", DiffOut{}, err
	}
	var d *session.Diff
	if in.Origin {
		if in.Rebase {
			return "", DiffOut{}, &ArgumentError{Tool: "session_diff", Arg: "origin", Msg: "not with rebase: a branch's origin is its parent's, only its own baseline moves"}
		}
		d, err = l.Session.DiffOrigin(ctx)
	} else {
		d, err = l.Session.Diff(ctx, in.Rebase)
	}
	if err != nil {
		return "", DiffOut{}, err
	}
	out := DiffOut{Writes: []DiffFile{}, Links: map[string]string{}, Deletes: []string{}, Modes: map[string]string{}}
	var b strings.Builder
	budget := maxDiffText
	sel := selectDiff(d, in.Paths)
	for _, p := range sel.writes {
		c := d.Writes[p]
		f := DiffFile{Path: p, Size: len(c), Mode: fmt.Sprintf("%04o", d.Modes[p].Perm())}
		switch {
		case len(c) > maxText:
			f.Omitted = fmt.Sprintf("%d bytes, over the %d a file's content may have here", len(c), maxText)
		case len(c) > budget:
			f.Omitted = fmt.Sprintf("this answer already carries %d bytes of content: ask for this path alone", maxDiffText-budget)
		case utf8.Valid(c) && !bytes.ContainsRune(c, 0): // text; a NUL says binary, as git and diff judge
			f.Text, budget = string(c), budget-len(c)
		default:
			f.Base64, budget = base64.StdEncoding.EncodeToString(c), budget-len(c)
		}
		out.Writes = append(out.Writes, f)
		fmt.Fprintf(&b, "write %s (%d bytes, mode %s)", p, f.Size, f.Mode)
		switch {
		case f.Omitted != "":
			fmt.Fprintf(&b, ": content omitted, %s\n", f.Omitted)
		case f.Base64 != "":
			b.WriteString(": binary (base64 in the structured result)\n")
		default:
			fmt.Fprintf(&b, ":\n%s", f.Text)
			if !strings.HasSuffix(f.Text, "\n") {
				b.WriteString("\n\\ no newline at end of file\n")
			}
		}
	}
	for _, p := range sel.links {
		out.Links[p] = d.Links[p]
		fmt.Fprintf(&b, "link %s -> %s\n", p, d.Links[p])
	}
	for _, p := range sel.deletes {
		out.Deletes = append(out.Deletes, p)
		fmt.Fprintf(&b, "delete %s\n", p)
	}
	for _, p := range sel.chmods {
		out.Modes[p] = fmt.Sprintf("%04o", d.Modes[p].Perm())
		fmt.Fprintf(&b, "chmod %s %s\n", out.Modes[p], p)
	}
	if out.Digest, err = diffDigest(d, sel); err != nil {
		return "", DiffOut{}, err
	}
	if b.Len() == 0 {
		b.WriteString("no changes\n")
	} else if sd := t.seedOf(in.SessionID); sd != nil && !in.Origin && !in.Rebase {
		args, _ := json.Marshal(SessionCommitIn{SessionID: in.SessionID, Paths: in.Paths, ExpectDigest: out.Digest})
		fmt.Fprintf(&b, "digest %s\nnext: session_commit %s applies exactly these changes to %s\n", out.Digest, args, sd.dir)
	}
	return b.String(), out, nil
}

// diffSel is what of a session diff a call selected, each list sorted:
// written files, symlinks, deletes, and changes of permissions alone.
type diffSel struct{ writes, links, deletes, chmods []string }

// selectDiff is d's changes at or beneath the workspace-relative paths sel
// (all of them when sel is empty).
func selectDiff(d *session.Diff, sel []string) diffSel {
	var out diffSel
	pick := func(paths []string, ok func(string) bool) []string {
		var keep []string
		for _, p := range paths {
			if ok(p) && beneath(p, sel) {
				keep = append(keep, p)
			}
		}
		return keep
	}
	all := func(string) bool { return true }
	out.writes = pick(slices.Sorted(maps.Keys(d.Writes)), all)
	out.links = pick(slices.Sorted(maps.Keys(d.Links)), all)
	out.deletes = pick(slices.Sorted(slices.Values(d.Deletes)), all)
	out.chmods = pick(slices.Sorted(maps.Keys(d.Modes)), func(p string) bool { return modeOnly(d, p) })
	return out
}

// modeOnly says whether p's entry in d.Modes is a change of permissions alone
// (d.Modes also has every written file, and symlinks, whose mode means nothing).
func modeOnly(d *session.Diff, p string) bool {
	_, written := d.Writes[p]
	_, link := d.Links[p]
	return !written && !link
}

func (t *tools) sessionNetwork(ctx context.Context, _ *mcp.CallToolRequest, in NetworkIn) (string, NetworkOut, error) {
	if in.After < 0 {
		return "", NetworkOut{}, &ArgumentError{Tool: "session_network", Arg: "after", Msg: "must not be negative"}
	}
	l, err := t.svc.Session(in.SessionID)
	if err != nil {
		return "", NetworkOut{}, err
	}
	all := l.Session.Network()
	out := NetworkOut{Network: netLines(all[min(in.After, len(all)):]), Next: len(all)}
	if len(out.Network) == 0 {
		return "no network attempts", out, nil
	}
	return strings.Join(out.Network, "\n"), out, nil
}

func (t *tools) seedOf(id string) *seed {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.seeds[id]
}

func (t *tools) sessionClose(ctx context.Context, _ *mcp.CallToolRequest, in SessionIDIn) (string, SessionOut, error) {
	l, err := t.svc.Session(in.SessionID)
	if err != nil {
		return "", SessionOut{}, err
	}
	info := l.Info()
	if err := t.svc.CloseSession(in.SessionID); err != nil {
		return "", SessionOut{}, err
	}
	t.mu.Lock()
	sd := t.seeds[in.SessionID]
	delete(t.seeds, in.SessionID)
	t.mu.Unlock()
	out := SessionOut{SessionID: info.SessionID, Rung: info.Rung, Workspace: info.Workspace, Closed: true}
	if sd != nil {
		out.SeedDir = sd.dir
	}
	return "closed " + in.SessionID, out, nil
}
