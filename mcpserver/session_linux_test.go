package mcpserver_test

import (
	"context"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dryexec/dryexec/mcpserver"
	"github.com/dryexec/dryexec/netsim/tun"
)

func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for p, c := range files {
		p = filepath.Join(dir, p)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		return "(" + err.Error() + ")"
	}
	return string(b)
}

// TestMCPSessionParity: an MCP session does what an API session does: its
// workspace seeded from a host directory, stdout and stderr apart, the
// network attempts, the diff with contents, and its changes committed back
// to the host (as a trial the policy decided), refused where the host moved
// since the seeding unless forced.
func TestMCPSessionParity(t *testing.T) {
	requireNS(t)
	cs := inProcess(t)
	src := t.TempDir()
	writeFiles(t, src, map[string]string{"keep.txt": "keep\n", "edit.txt": "old\n", "gone.txt": "x\n", "run.sh": "echo run\n", "sub/a.txt": "a\n"})

	var so mcpserver.SessionOut
	call(t, cs, "session_open", map[string]any{"seed_dir": src}, &so)
	if so.SeedDir != src || so.Workspace == "" {
		t.Fatalf("session_open: %+v", so)
	}
	sid := map[string]any{"session_id": so.SessionID}
	with := func(kv ...any) map[string]any {
		m := map[string]any{"session_id": so.SessionID}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1]
		}
		return m
	}
	var sh mcpserver.ShellOut
	call(t, cs, "session_shell", with("command", "cat keep.txt sub/a.txt; echo err >&2"), &sh)
	if sh.Stdout != "keep\na\n" || sh.Stderr != "err\n" || !strings.Contains(sh.Transcript, "err\n") {
		t.Fatalf("seeded workspace, stdout and stderr apart: %+v", sh)
	}
	call(t, cs, "session_shell", with("command", `echo new > edit.txt && rm gone.txt && chmod 755 run.sh && mkdir -p deep/er && printf 'bin\000' > deep/er/b.bin && ln -s keep.txt link`), &sh)
	if sh.ExitCode != 0 {
		t.Fatalf("session_shell: %+v", sh)
	}

	var df mcpserver.DiffOut
	r := call(t, cs, "session_diff", sid, &df)
	got := map[string]mcpserver.DiffFile{}
	for _, f := range df.Writes {
		got[f.Path] = f
	}
	if got["edit.txt"].Text != "new\n" || got["deep/er/b.bin"].Base64 != base64.StdEncoding.EncodeToString([]byte("bin\x00")) ||
		len(df.Deletes) != 1 || df.Deletes[0] != "gone.txt" || df.Modes["run.sh"] != "0755" || df.Links["link"] != "keep.txt" {
		t.Fatalf("session_diff: %+v", df)
	}
	// The text a model reads has the content too, and the next step.
	if !strings.Contains(text(r), "write edit.txt (4 bytes, mode 0644):\nnew\n") || !strings.Contains(text(r), "session_commit") {
		t.Fatalf("session_diff text:\n%s", text(r))
	}
	df = mcpserver.DiffOut{} // a fresh one: decoding merges into maps
	call(t, cs, "session_diff", with("paths", []string{"deep"}), &df)
	if len(df.Writes) != 1 || df.Writes[0].Path != "deep/er/b.bin" || len(df.Deletes) != 0 || len(df.Modes) != 0 || len(df.Links) != 0 {
		t.Fatalf("session_diff of deep: %+v", df)
	}
	if readFile(t, filepath.Join(src, "edit.txt")) != "old\n" {
		t.Fatal("the session changed the host")
	}

	// A person edits a file the session changed: the commit is refused
	// whole, nothing written.
	writeFiles(t, src, map[string]string{"edit.txt": "human\n"})
	bad, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "session_commit", Arguments: sid})
	if err != nil || !bad.IsError || !strings.Contains(text(bad), "the host changed since the session was seeded") || !strings.Contains(text(bad), "edit.txt") {
		t.Fatalf("session_commit over a host change: %v %s", err, text(bad))
	}
	if _, err := os.Stat(filepath.Join(src, "deep")); err == nil || readFile(t, filepath.Join(src, "gone.txt")) != "x\n" {
		t.Fatal("a refused session_commit changed the host")
	}
	// What did not move can be committed alone.
	var sc mcpserver.SessionCommitOut
	call(t, cs, "session_commit", with("paths", []string{"deep"}), &sc)
	if sc.TrialID == "" || sc.Decision.Choice == "" || len(sc.Applied) == 0 || readFile(t, filepath.Join(src, "deep/er/b.bin")) != "bin\x00" {
		t.Fatalf("session_commit of deep: %+v", sc)
	}
	if readFile(t, filepath.Join(src, "edit.txt")) != "human\n" {
		t.Fatal("a session_commit of deep changed edit.txt")
	}
	// The person decides the session's version wins.
	call(t, cs, "session_commit", with("force", true), &sc)
	fi, _ := os.Stat(filepath.Join(src, "run.sh"))
	target, _ := os.Readlink(filepath.Join(src, "link"))
	if readFile(t, filepath.Join(src, "edit.txt")) != "new\n" || fi == nil || fi.Mode().Perm() != 0o755 || target != "keep.txt" || readFile(t, filepath.Join(src, "keep.txt")) != "keep\n" {
		t.Fatalf("after session_commit: edit.txt %q, run.sh %v, link %q", readFile(t, filepath.Join(src, "edit.txt")), fi, target)
	}
	if _, err := os.Stat(filepath.Join(src, "gone.txt")); !os.IsNotExist(err) {
		t.Fatalf("gone.txt after session_commit: %v", err)
	}
	// It went through a stored trial, now committed; the session's
	// baseline moved with it.
	var tr mcpserver.TrialOut
	call(t, cs, "show_trial", map[string]any{"trial_id": sc.TrialID}, &tr)
	if tr.Status != "committed" || len(tr.Next) != 0 {
		t.Fatalf("the session's trial: %+v", tr)
	}
	df = mcpserver.DiffOut{}
	call(t, cs, "session_diff", sid, &df)
	if len(df.Writes)+len(df.Deletes)+len(df.Modes)+len(df.Links) != 0 {
		t.Fatalf("session_diff after a full commit: %+v", df)
	}
	nothing, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "session_commit", Arguments: sid})
	if err != nil || !nothing.IsError || !strings.Contains(text(nothing), "no changes to commit") {
		t.Fatalf("session_commit of nothing: %v %s", err, text(nothing))
	}

	// The network: nothing leaves, and the attempt is in the exec's result
	// and the session's log (where netsim can intercept).
	call(t, cs, "session_shell", with("command", `python3 -c 'import socket; socket.socket().connect_ex(("203.0.113.9", 80))'`), &sh)
	var nl mcpserver.NetworkOut
	call(t, cs, "session_network", sid, &nl)
	if tun.CheckTUN() == nil {
		if len(sh.Network) != 1 || !strings.HasPrefix(sh.Network[0], "blocked tcp") || !strings.Contains(sh.Network[0], "203.0.113.9:80") {
			t.Errorf("session_shell network: %q", sh.Network)
		}
		if len(nl.Network) == 0 || nl.Network[len(nl.Network)-1] != sh.Network[0] || nl.Next != len(nl.Network) {
			t.Errorf("session_network: %+v", nl)
		}
		call(t, cs, "session_network", with("after", nl.Next), &nl)
		if len(nl.Network) != 0 {
			t.Errorf("session_network after next: %+v", nl)
		}
	}

	// A session opened without seed_dir has nowhere to commit to.
	var bare mcpserver.SessionOut
	call(t, cs, "session_open", map[string]any{}, &bare)
	nowhere, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "session_commit", Arguments: map[string]any{"session_id": bare.SessionID}})
	if err != nil || !nowhere.IsError || !strings.Contains(text(nowhere), "not opened with seed_dir") {
		t.Fatalf("session_commit without a seed: %v %s", err, text(nowhere))
	}
	for _, id := range []string{so.SessionID, bare.SessionID} {
		var cl mcpserver.SessionOut
		call(t, cs, "session_close", map[string]any{"session_id": id}, &cl)
	}
}
