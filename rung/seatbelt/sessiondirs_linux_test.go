package seatbelt

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dryexec/dryexec"
)

// sameTree fails t unless a and b hold the same names, types, modes,
// contents and symlink targets.
func sameTree(t *testing.T, a, b string) {
	t.Helper()
	if out, err := exec.Command("diff", "-r", "--no-dereference", a, b).CombinedOutput(); err != nil {
		t.Errorf("%s and %s differ: %v\n%s", a, b, err, out)
	}
}

// TestSessionDirsFork: a branch's dirs are the parent's workspace (as its
// workspace and, again, its baseline: the fork point) and the parent's
// baseline (as its origin), each a tree of its own: a write to the
// branch's workspace changes neither its baseline nor the parent's; a
// session opened fresh has an empty workspace and baseline and no origin;
// a failed clone leaves nothing behind.
func TestSessionDirsFork(t *testing.T) {
	t.Setenv("TMPDIR", t.TempDir())
	fresh, err := newSessionDirs(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer fresh.remove()
	for _, d := range []string{fresh.ws, fresh.base, fresh.cmdTmp, fresh.marks} {
		if names, err := os.ReadDir(d); err != nil || len(names) != 0 {
			t.Errorf("fresh session: %s holds %v (%v)", d, names, err)
		}
	}
	if fresh.origin != "" {
		t.Errorf("a fresh session has an origin %s", fresh.origin)
	}
	parentWS, parentBase := tree(t), filepath.Join(t.TempDir(), "base")
	if err := os.MkdirAll(filepath.Join(parentBase, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(parentBase, "sub", "old.txt"), []byte("the parent's baseline\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	b, err := newSessionDirs(&forkSource{ws: parentWS, base: parentBase, clone: copyClone})
	if err != nil {
		t.Fatal(err)
	}
	defer b.remove()
	sameTree(t, parentWS, b.ws)
	sameTree(t, parentWS, b.base)
	sameTree(t, parentBase, b.origin)
	if err := os.WriteFile(filepath.Join(b.ws, "keep.txt"), []byte("the branch's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(parentWS, "keep.txt")); string(got) == "the branch's\n" {
		t.Error("a write to the branch's workspace reached the parent's")
	}
	if got, _ := os.ReadFile(filepath.Join(b.base, "keep.txt")); string(got) == "the branch's\n" {
		t.Error("a write to the branch's workspace reached its baseline")
	}
	left := func() []string {
		names, _ := filepath.Glob(filepath.Join(os.TempDir(), "dryexec-seatbelt-session-*"))
		return names
	}
	before := left()
	if _, err := newSessionDirs(&forkSource{ws: filepath.Join(parentWS, "absent"), base: parentBase, clone: copyClone}); err == nil {
		t.Error("a branch of a workspace that is gone was made")
	}
	if after := left(); !slices.Equal(before, after) {
		t.Errorf("a failed branch left %q", after)
	}
}

// TestSessionProfileOrigin: a session's profile lets it write its
// workspace, baseline and tmp only: a branch's origin (the parent's
// baseline, which its origin diff is taken against) is not writable, and
// the markers' dir is hidden.
func TestSessionProfileOrigin(t *testing.T) {
	d := &sessionDirs{tmp: "/private/var/s", ws: "/private/var/s/workspace", base: "/private/var/s/baseline",
		cmdTmp: "/private/var/s/tmp", marks: "/private/var/s/marks", origin: "/private/var/s/origin"}
	hidden := []string{"/Users/a/.local/state/dryexec"}
	pr := d.profile([]string{"/Users/a/.ssh"}, hidden, 41999, "dryexec-t")
	text, err := pr.SBPL()
	if err != nil {
		t.Fatal(err)
	}
	r := rules(t, text)
	if got, want := r["allow file-write*"].filters()["subpath"], []string{d.ws, d.base, d.cmdTmp}; !slices.Equal(got, want) {
		t.Errorf("writable %q, want %q", got, want)
	}
	if got := r["deny file-read* file-write*"].filters()["subpath"]; !slices.Contains(got, d.marks) || !slices.Contains(got, hidden[0]) {
		t.Errorf("hidden %q, want the markers' dir and dryexec's state", got)
	}
	if len(hidden) != 1 {
		t.Errorf("profile changed its caller's hidden paths: %q", hidden)
	}
}

// TestCheckSandbox: a session from an image is refused as unavailable
// here, as a trial's is; a plain one is not.
func TestCheckSandbox(t *testing.T) {
	var ie *dryexec.IsolationUnavailableError
	if err := checkSandbox(dryexec.SandboxSpec{Image: &dryexec.ImageRoot{}}); !errors.As(err, &ie) {
		t.Errorf("image session: %v, want an IsolationUnavailableError", err)
	}
	if err := checkSandbox(dryexec.SandboxSpec{Net: []string{"none"}}); err != nil {
		t.Errorf("plain session refused: %v", err)
	}
}
