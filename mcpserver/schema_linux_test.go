package mcpserver_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dryexec/dryexec/mcpserver"
	"github.com/dryexec/dryexec/rung"
	"github.com/dryexec/dryexec/server"
)

// newService is a service with its own store and the default policy.
func newService(t *testing.T) *server.Service {
	t.Helper()
	home := t.TempDir()
	svc, err := server.NewService(server.Config{StoreDir: home,
		Getenv: func(k string) string { return map[string]string{"PATH": "/usr/bin:/bin"}[k] }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	return svc
}

// inProcess connects the official Go SDK's client to the tools over an
// in-memory transport.
func inProcess(t *testing.T) *mcp.ClientSession {
	t.Helper()
	svc := newService(t)
	ct, st := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	ss, err := mcpserver.New(svc, "test", t.TempDir(), mcpserver.Options{AllowForce: true}).Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ss.Close() })
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// typeArrays lists the places in a schema where "type" is a list, which
// several model providers refuse and the MCP Inspector's CLI mishandles
// (it sent argv as a string).
func typeArrays(v any, at string) []string {
	var out []string
	switch v := v.(type) {
	case map[string]any:
		for k, x := range v {
			if _, list := x.([]any); list && k == "type" {
				out = append(out, at)
			}
			out = append(out, typeArrays(x, at+"/"+k)...)
		}
	case []any:
		for _, x := range v {
			out = append(out, typeArrays(x, at)...)
		}
	}
	return out
}

// TestMCPSchemas: what tools/list and initialize tell a client.
func TestMCPSchemas(t *testing.T) {
	cs := inProcess(t)
	if ins := cs.InitializeResult().Instructions; !strings.Contains(ins, "commit_trial") || !strings.Contains(ins, "session_commit") {
		t.Errorf("instructions: %q", ins)
	}
	list, err := cs.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	tools := map[string]*mcp.Tool{}
	for _, tl := range list.Tools {
		tools[tl.Name] = tl
	}
	schemaOf := func(v any) map[string]any {
		b, _ := json.Marshal(v)
		var m map[string]any
		json.Unmarshal(b, &m)
		return m
	}
	destructive := []string{"commit_trial", "discard_trial", "session_commit", "session_close", "session_keep"}
	readOnly := []string{"show_trial", "session_network", "session_compare", "session_parked"}
	for name, tl := range tools {
		in, out := schemaOf(tl.InputSchema), schemaOf(tl.OutputSchema)
		if in["type"] != "object" || out["type"] != "object" {
			t.Errorf("%s: input %v, output %v: want objects", name, in["type"], out["type"])
		}
		for _, where := range append(typeArrays(in, "input"), typeArrays(out, "output")...) {
			t.Errorf("%s: a type list at %s", name, where)
		}
		if tl.Title == "" || len(tl.Description) < 30 {
			t.Errorf("%s: no title or description", name)
		}
		a := tl.Annotations
		if a == nil {
			t.Errorf("%s: no annotations", name)
			continue
		}
		if got, want := a.DestructiveHint != nil && *a.DestructiveHint, slices.Contains(destructive, name); got != want {
			t.Errorf("%s: destructiveHint %v", name, got)
		}
		if got, want := a.ReadOnlyHint, slices.Contains(readOnly, name); got != want {
			t.Errorf("%s: readOnlyHint %v", name, got)
		}
	}
	props := func(tool string) map[string]any {
		return schemaOf(tools[tool].InputSchema)["properties"].(map[string]any)
	}
	enum := func(tool, arg string) []string {
		var out []string
		for _, v := range props(tool)[arg].(map[string]any)["enum"].([]any) {
			out = append(out, v.(string))
		}
		return out
	}
	// Every rung of this build but host, which isolates nothing: the
	// model does not get to run its command on the host.
	if got, want := enum("run_trial", "rung"), append(slices.DeleteFunc(rung.Built(), func(r string) bool { return r == "host" }), "best"); !slices.Equal(got, want) {
		t.Errorf("run_trial rung enum %q, want %q", got, want)
	}
	// Every rung of this build that holds sessions is offered, none that
	// does not (the sessions a rung holds are opened in the session tests).
	if got, want := enum("session_open", "rung"), []string{"ns", "gvisor", "vm", "best"}; !slices.Equal(got, want) {
		t.Errorf("session_open rung enum %q, want %q", got, want)
	}
	run := props("run_trial")
	if run["argv"].(map[string]any)["type"] != "array" || run["command"].(map[string]any)["type"] != "string" {
		t.Errorf("run_trial argv/command: %v", run)
	}
	for _, arg := range []string{"argv", "command"} {
		if d, _ := run[arg].(map[string]any)["description"].(string); !strings.Contains(d, "exactly one of argv and command") {
			t.Errorf("run_trial %s does not say argv or command: %q", arg, d)
		}
	}
	if req := schemaOf(tools["commit_trial"].InputSchema)["required"]; !slices.Equal(req.([]any), []any{"trial_id"}) {
		t.Errorf("commit_trial required: %v", req)
	}
}
