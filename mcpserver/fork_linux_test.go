package mcpserver_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dryexec/dryexec/compare"
	"github.com/dryexec/dryexec/mcpserver"
)

// session_fork, session_compare and session_keep on real ns sessions, every
// result checked against its tool's output schema; then session_commit of
// the parent applies the kept branch's change to the seed directory.
func TestMCPFork(t *testing.T) {
	requireNS(t)
	cs := inProcess(t)
	src := t.TempDir()
	writeFiles(t, src, map[string]string{"f.txt": "seed\n"})
	var so mcpserver.SessionOut
	call(t, cs, "session_open", map[string]any{"seed_dir": src}, &so)
	var fo mcpserver.ForkOut
	call(t, cs, "session_fork", map[string]any{"session_id": so.SessionID, "n": 2}, &fo)
	if len(fo.Branches) != 2 {
		t.Fatalf("session_fork: %+v", fo)
	}
	var sh mcpserver.ShellOut
	for i, b := range fo.Branches {
		call(t, cs, "session_shell", map[string]any{"session_id": b.SessionID, "command": "cat f.txt; echo branch" + string(rune('0'+i)) + " > f.txt"}, &sh)
		if sh.Stdout != "seed\n" {
			t.Errorf("branch %d sees %q", i, sh.Stdout)
		}
	}
	var cmp compare.Result
	r := call(t, cs, "session_compare", map[string]any{"ids": []string{fo.Branches[0].SessionID, fo.Branches[1].SessionID}}, &cmp)
	if len(cmp.Paths) != 1 || cmp.Paths[0].Agreement != compare.Differ || !strings.Contains(text(r), "f.txt") {
		t.Errorf("session_compare: %+v\n%s", cmp, text(r))
	}
	var df mcpserver.DiffOut
	call(t, cs, "session_diff", map[string]any{"session_id": fo.Branches[1].SessionID, "origin": true}, &df)
	if len(df.Writes) != 1 || df.Writes[0].Text != "branch1\n" {
		t.Errorf("session_diff origin: %+v", df)
	}
	var ko mcpserver.KeepOut
	call(t, cs, "session_keep", map[string]any{"session_id": so.SessionID, "branch": fo.Branches[1].SessionID}, &ko)
	if ko.Kept != fo.Branches[1].SessionID || len(ko.Discarded) != 1 {
		t.Errorf("session_keep: %+v", ko)
	}
	call(t, cs, "session_commit", map[string]any{"session_id": so.SessionID}, nil)
	if b, _ := os.ReadFile(filepath.Join(src, "f.txt")); string(b) != "branch1\n" {
		t.Errorf("after keep and commit the seed holds %q", b)
	}
}
