package store

import (
	"errors"
	"slices"
	"testing"

	"github.com/dryexec/dryexec"
)

// TestMapImage: the commit rule for a trial on an image (docs/images.md):
// only what is strictly beneath the workspace, mapped onto the target;
// refused without a target, and a target refused for a host trial.
func TestMapImage(t *testing.T) {
	to := t.TempDir()
	files := []dryexec.FileChange{{Op: "mkdir", Path: "/app"}, {Op: "create", Path: "/app/a"}, {Op: "modify", Path: "/app/sub/b"},
		{Op: "create", Path: "/apple"}, {Op: "modify", Path: "/etc/passwd"}}
	for _, tc := range []struct {
		name      string
		ws, to    string
		image     bool
		want      []string
		outside   int
		wantErr   error
		sameDelta bool
	}{
		{"workspace /app", "/app", to, true, []string{to + "/a", to + "/sub/b"}, 3, nil, false},
		{"workspace /", "/", to, true, []string{to + "/app", to + "/app/a", to + "/app/sub/b", to + "/apple", to + "/etc/passwd"}, 0, nil, false},
		{"no target", "/app", "", true, nil, 0, dryexec.ErrImageCommit, false},
		{"relative target", "/app", "rel", true, nil, 0, dryexec.ErrCommitRefused, false},
		{"target for a host trial", "", to, false, nil, 0, dryexec.ErrCommitRefused, false},
		{"host trial", "", "", false, nil, 0, nil, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := &dryexec.StateDelta{TrialID: "tr_x", Files: files}
			if tc.image {
				d.Image = &dryexec.DeltaImage{Ref: "r", Digest: "sha256:x", Workspace: tc.ws}
			}
			m, outside, err := MapImage(d, tc.to)
			if !errors.Is(err, tc.wantErr) || (tc.wantErr == nil) != (err == nil) {
				t.Fatalf("err %v, want %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			if tc.sameDelta {
				if m != d {
					t.Error("a host trial without a target was changed")
				}
				return
			}
			var got []string
			for _, f := range m.Files {
				got = append(got, f.Path)
			}
			if !slices.Equal(got, tc.want) || outside != tc.outside {
				t.Errorf("%q (%d outside), want %q (%d)", got, outside, tc.want, tc.outside)
			}
			if d.Files[1].Path != "/app/a" {
				t.Error("the stored delta was changed")
			}
		})
	}
}
