package seatbelt

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
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

// decide is what the profile text decides for op on path, read the way
// SBPL decides: the last rule whose operation covers op (a trailing * is a
// prefix: file-write* covers file-write-data) and whose (subpath …) or
// (literal …) filters match path, or that has none, wins; the default's
// deny when none does. Rules with other filters (network, mach) are not
// file rules and are skipped.
func decide(t *testing.T, text, op, path string) string {
	t.Helper()
	verdict := ""
	for _, f := range readSBPL(t, text) {
		h := strings.Fields(f.head())
		if len(h) < 2 || h[0] != "allow" && h[0] != "deny" {
			continue
		}
		if h[1] == "default" {
			verdict = h[0]
			continue
		}
		covers := slices.ContainsFunc(h[1:], func(o string) bool {
			return o == op || strings.HasSuffix(o, "*") && strings.HasPrefix(op, strings.TrimSuffix(o, "*"))
		})
		if !covers {
			continue
		}
		fl := f.filters()
		matched := len(fl) == 0
		for _, sp := range fl["subpath"] {
			matched = matched || path == sp || strings.HasPrefix(path, sp+"/")
		}
		matched = matched || slices.Contains(fl["literal"], path)
		if matched {
			verdict = h[0]
		}
	}
	return verdict
}

// TestSessionCommandProfile: the profile each command of a session runs
// under (the guest, unconfined, puts confine(profile) before each) lets it
// write its workspace and tmp only: the baseline, a branch's origin (what
// the session's diffs are taken against) and the markers' dir can be
// neither written nor read, nor can a name that only starts like one of
// them be mistaken for it.
func TestSessionCommandProfile(t *testing.T) {
	d := &sessionDirs{tmp: "/private/var/s", ws: "/private/var/s/workspace", base: "/private/var/s/baseline",
		cmdTmp: "/private/var/s/tmp", marks: "/private/var/s/marks", origin: "/private/var/s/origin"}
	hidden := []string{"/Users/a/.local/state/dryexec"}
	pr := d.profile([]string{"/Users/a/.ssh"}, hidden, 41999, "dryexec-t")
	text, err := pr.SBPL()
	if err != nil {
		t.Fatal(err)
	}
	r := rules(t, text)
	if got, want := r["allow file-write*"].filters()["subpath"], []string{d.ws, d.cmdTmp}; !slices.Equal(got, want) {
		t.Errorf("writable %q, want %q", got, want)
	}
	if len(hidden) != 1 {
		t.Errorf("profile changed its caller's hidden paths: %q", hidden)
	}
	for _, c := range []struct {
		path        string
		read, write string
	}{
		{d.ws + "/src/a.go", "allow", "allow"},
		{d.ws, "allow", "allow"},
		{d.cmdTmp + "/x", "allow", "allow"},
		{d.base, "deny", "deny"},
		{d.base + "/src/a.go", "deny", "deny"},
		{d.origin + "/src/a.go", "deny", "deny"},
		{d.marks + "/m1", "deny", "deny"},
		{hidden[0] + "/sessions", "deny", "deny"},
		{d.tmp + "/netsim-ca.pem", "allow", "deny"},
		{d.tmp + "/baseline2/x", "allow", "deny"},
		{d.ws + "2/x", "allow", "deny"},
		{"/Users/a/.ssh/id_rsa", "deny", "deny"},
		{"/Users/a/notes.txt", "allow", "deny"},
	} {
		for _, op := range []struct{ name, want string }{{"file-read-data", c.read}, {"file-read-metadata", c.read}, {"file-write-data", c.write}, {"file-write-create", c.write}, {"file-write-unlink", c.write}} {
			want := op.want
			if op.name == "file-read-metadata" && c.path == "/Users/a/.ssh/id_rsa" {
				want = "allow" // a mask hides content, not names
			}
			if got := decide(t, text, op.name, c.path); got != want {
				t.Errorf("%s %s: %s, want %s", op.name, c.path, got, want)
			}
		}
	}
	// The prefix the guest gets: sandbox-exec with this very profile, then
	// "--" and (the guest adds it) the command.
	if got, want := confine(text, nil), []string{SandboxExec, "-p", text, "--"}; !slices.Equal(got, want) {
		t.Errorf("command prefix %q, want %q", got, want)
	}
	// A session that is no branch has no origin to hide.
	d.origin = ""
	if got := d.profile(nil, nil, 0, "").Hidden; !slices.Equal(got, []string{d.base, d.marks}) {
		t.Errorf("hidden %q, want the baseline and the markers' dir", got)
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
