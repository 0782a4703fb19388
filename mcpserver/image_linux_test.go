package mcpserver_test

import (
	"archive/tar"
	"os"
	"path/filepath"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/dryexec/dryexec/internal/imagetest"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/mcpserver"
)

// TestMCPImage: run_trial and session_open take an image (pulled from a
// registry on loopback on first use); commit_trial of an image trial needs
// `to` and applies only the workspace's changes there.
func TestMCPImage(t *testing.T) {
	testreq.NeedRoot(t)
	requireNS(t)
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	img := imagetest.Image(t, imagetest.Config{Env: []string{"PATH=/bin"}, WorkingDir: "/w"},
		imagetest.Tools(t, "cat"),
		imagetest.Layer(t, imagetest.Entry{Name: "w/", Type: tar.TypeDir}, imagetest.Entry{Name: "etc/", Type: tar.TypeDir}))
	ref := imagetest.Registry(t) + "/mcp/img:1"
	imagetest.Push(t, ref, img)
	s := inProcess(t)

	var tr mcpserver.TrialOut
	call(t, s, "run_trial", map[string]any{"image": ref, "command": "pwd; echo x > out.txt; echo y > /etc/y"}, &tr)
	if tr.Stdout != "/w\n" || len(tr.Files) != 2 {
		t.Fatalf("run_trial on the image: %+v", tr)
	}
	r, err := s.CallTool(t.Context(), &mcp.CallToolParams{Name: "commit_trial", Arguments: map[string]any{"trial_id": tr.TrialID, "force": true}})
	if err != nil || !r.IsError {
		t.Fatalf("commit without to: %v %+v", err, r)
	}
	dir := t.TempDir()
	var co mcpserver.CommitOut
	call(t, s, "commit_trial", map[string]any{"trial_id": tr.TrialID, "force": true, "to": dir}, &co)
	if b, err := os.ReadFile(filepath.Join(dir, "out.txt")); err != nil || string(b) != "x\n" || len(co.Applied) != 1 {
		t.Fatalf("commit to %s: %q %v, applied %v", dir, b, err, co.Applied)
	}

	var so mcpserver.SessionOut
	call(t, s, "session_open", map[string]any{"image": ref}, &so)
	var sh mcpserver.ShellOut
	call(t, s, "session_shell", map[string]any{"session_id": so.SessionID, "command": "cat /etc/hostname 2>/dev/null || echo image-root; ls /w"}, &sh)
	if sh.Stdout != "image-root\n" {
		t.Errorf("session on the image: %+v", sh)
	}
	call(t, s, "session_close", map[string]any{"session_id": so.SessionID}, nil)
}
