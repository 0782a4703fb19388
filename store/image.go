package store

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"github.com/dryexec/dryexec"
)

// MapImage is how a trial that ran on an image commits (docs/images.md,
// "Commit"). Its paths are the image's, not the host's, so it commits only
// onto a host directory the caller names, to, and only what it changed
// strictly beneath its workspace (the action's cwd in the image):
// WORKSPACE/a/b becomes TO/a/b, and every other change (the image's /etc,
// /tmp, the workspace directory itself) is never committable and left out.
// It returns a copy of d with the mapped changes and how many were left
// out. A trial on the host's view with a to, or on an image without one, is
// refused (ErrImageCommit).
func MapImage(d *dryexec.StateDelta, to string) (*dryexec.StateDelta, int, error) {
	switch {
	case d.Image == nil && to == "":
		return d, 0, nil
	case d.Image == nil:
		return nil, 0, fmt.Errorf("%w: %s ran on the host's view; a target directory is only for a trial on an image", dryexec.ErrCommitRefused, d.TrialID)
	case to == "":
		return nil, 0, fmt.Errorf("%w %s (%s): its paths are the image's, not the host's; name a host directory to receive what it changed beneath %s (dryexec commit --to DIR %s)",
			dryexec.ErrImageCommit, d.Image.Ref, d.TrialID, d.Image.Workspace, d.TrialID)
	}
	if !filepath.IsAbs(to) {
		return nil, 0, fmt.Errorf("%w: target %q is not absolute", dryexec.ErrCommitRefused, to)
	}
	to = filepath.Clean(to)
	if st, err := os.Stat(to); err != nil || !st.IsDir() {
		return nil, 0, fmt.Errorf("%w: target %s is not a directory", dryexec.ErrCommitRefused, dryexec.QuotePath(to))
	}
	ws := path.Clean(d.Image.Workspace)
	under := func(p string) (string, bool) {
		if ws == "/" {
			return strings.TrimPrefix(p, "/"), p != "/"
		}
		rel, ok := strings.CutPrefix(p, ws+"/")
		return rel, ok
	}
	m := *d
	m.SetFileSource(nil)
	m.Files, m.Touched = nil, nil
	left := 0
	err := d.EachFile(func(c *dryexec.FileChange) error {
		rel, ok := under(c.Path)
		if !ok {
			left++
			return nil
		}
		f := *c
		f.Path = to + "/" + rel
		m.Files = append(m.Files, f)
		return nil
	})
	if err != nil {
		return nil, 0, err
	}
	for _, c := range d.Touched {
		if rel, ok := under(c.Path); ok {
			c.Path = to + "/" + rel
			m.Touched = append(m.Touched, c)
		}
	}
	if m.Files == nil {
		m.Files = []dryexec.FileChange{}
	}
	return &m, left, nil
}
