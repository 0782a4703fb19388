package linuxns

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
)

// Each change carries the path's owner: after the change for what the command
// made or changed, before it for a delete. As root the ids are the host's; a
// rootless trial's new and changed paths are the caller's (the guest's own view
// of ids is that of its user namespace).
func TestChangesCarryOwners(t *testing.T) {
	requireNS(t)
	dir := t.TempDir()
	for name, content := range map[string]string{"gone": "g\n", "sub/x": "x\n", "theirs": "t\n"} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	uid, gid := os.Getuid(), os.Getgid()
	root := uid == 0
	script := "echo n > new; mkdir nd; ln -s new ln; rm gone; rm -r sub; chmod 600 theirs"
	if root {
		for p, id := range map[string]int{"gone": 4000, "sub": 4100, "sub/x": 4200, "theirs": 4300} {
			if err := os.Lchown(filepath.Join(dir, p), id, id+1); err != nil {
				t.Fatal(err)
			}
		}
		script += "; chown 1234:5678 new; chown 2345:6789 nd; chown -h 3456:7890 ln"
	}
	d := runTrial(t, dir, dryexec.TrialSpec{}, "sh", "-c", script)
	if d.Process.ExitCode != 0 {
		t.Fatalf("exit %d: %s", d.Process.ExitCode, d.Process.Stderr)
	}
	type owner struct{ uid, gid int }
	want := map[string]owner{
		"new": {uid, gid}, "nd": {uid, gid}, "ln": {uid, gid}, "theirs": {uid, gid},
		"gone": {uid, gid}, "sub": {uid, gid}, "sub/x": {uid, gid},
	}
	if root {
		want = map[string]owner{
			"new": {1234, 5678}, "nd": {2345, 6789}, "ln": {3456, 7890}, "theirs": {4300, 4301},
			"gone": {4000, 4001}, "sub": {4100, 4101}, "sub/x": {4200, 4201},
		}
	}
	got := map[string]owner{}
	for _, f := range d.Files {
		if rel, ok := strings.CutPrefix(f.Path, dir+"/"); ok {
			got[rel] = owner{f.UID, f.GID}
		}
	}
	if len(got) != len(want) {
		t.Errorf("changes: %v", opPaths(d, dir))
	}
	for p, w := range want {
		if g, ok := got[p]; !ok || g != w {
			t.Errorf("%s: owner %v (reported: %v), want %v", p, g, ok, w)
		}
	}
}
