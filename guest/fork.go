package guest

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dryexec/dryexec/wire"
)

// forkStaging is what a staging adds for forks (package session's
// Session.Fork): freezing the workspace for branches, starting a branch from
// such a freeze, and a diff against the origin (the parent's baseline at the
// fork).
type forkStaging interface {
	freeze(req *wire.Fork, out *wire.Forked) error
	adopt(req *wire.ForkAdopt) error
	originDiff() (*wire.Diff, error)
}

// flattener is a staging that merges its layers in the background (the ns
// rung's): landFlattenedNow gives the workspace a finished merge's stack and
// says whether it did. It runs at the start of a request, when no exec of
// the session's runs.
type flattener interface {
	landFlattenedNow() (bool, error)
}

// handleFork serves the fork verbs (s.mu held).
func (s *session) handleFork(ctx context.Context, f *wire.Frame) (any, [][]byte, error) {
	fst, ok := s.st.(forkStaging)
	if !ok && f.Verb != wire.VerbApplyEnd {
		return nil, nil, remote("unsupported", "%s: the %s staging cannot fork", f.Verb, s.st.name())
	}
	switch f.Verb {
	case wire.VerbFork:
		var req wire.Fork
		if err := f.Decode(&req); err != nil {
			return nil, nil, err
		}
		// A waiting runner saw the workspace before the freeze: it goes, and
		// the next one starts over the new view.
		s.dropRunner()
		defer s.prestartPython()
		resume := s.quiesce()
		out := &wire.Forked{Cwd: s.shell.cwd, Env: slices.Clone(s.shell.env), Workspace: s.ws}
		var err error
		if req.Stream {
			err = s.streamFork(ctx, out)
		} else {
			err = fst.freeze(&req, out)
		}
		resume()
		if errors.Is(err, errWriters) {
			return nil, nil, remote("fork_busy", "%v", err)
		}
		if err != nil {
			return nil, nil, remote("fork", "%v", err)
		}
		return out, nil, nil
	case wire.VerbForkAdopt:
		var req wire.ForkAdopt
		if err := f.Decode(&req); err != nil {
			return nil, nil, err
		}
		s.dropRunner()
		defer s.prestartPython()
		var err error
		if s.push != nil {
			// The parent's trees, pushed before this adopt (gvisor).
			err = s.adoptStream(s.push, req.TreeBytes)
			s.push = nil
		} else {
			err = fst.adopt(&req)
		}
		if err != nil {
			return nil, nil, remote("fork", "starting the branch: %v", err)
		}
		// The parent's shell state: its cwd (the same path in this
		// workspace) and its exported environment.
		s.shell.env = rehome(req.Env, req.From, s.ws)
		if req.Cwd != "" {
			s.shell.cwd = rehome([]string{req.Cwd}, req.From, s.ws)[0]
		}
		return nil, nil, nil
	case wire.VerbPullOriginDiff:
		d, err := fst.originDiff()
		if errors.Is(err, errNoOrigin) {
			return nil, nil, remote("no_origin", "%v", err)
		}
		if err != nil {
			return nil, nil, remote("diff", "%v", err)
		}
		return d, nil, nil
	case wire.VerbApplyEnd:
		var req wire.ApplyEnd
		if err := f.Decode(&req); err != nil {
			return nil, nil, err
		}
		if s.push == nil {
			return nil, nil, remote("protocol", "apply.end without push_tree.begin")
		}
		s.dropRunner()
		defer s.prestartPython()
		ws, done, err := s.wsRoot()
		if err == nil {
			err = applyTree(ws, s.push, &req)
			done()
		}
		s.push = nil
		if err != nil {
			return nil, nil, remote("apply", "%v", err)
		}
		return nil, nil, nil
	}
	return nil, nil, remote("unknown_verb", "unknown verb %q", f.Verb)
}

// applyTree writes a tree of changes over the workspace ws: Deletes removed
// first (a path that became a directory, or the reverse, is in both), then
// the tar's files and symlinks written, replacing what is there, then Modes.
// Paths that leave the workspace or pass through a symlink are refused, and
// every change is made beneath ws's fd (os.Root): a symlink a process swaps
// in meanwhile cannot take a write outside.
func applyTree(ws *os.Root, r io.Reader, req *wire.ApplyEnd) error {
	check := func(p string) error {
		if err := checkWSPath(p); err != nil {
			return err
		}
		return noSymlinkParents(ws, p)
	}
	for _, p := range req.Deletes {
		if err := check(p); err != nil {
			return err
		}
		if err := ws.RemoveAll(p); err != nil {
			return err
		}
	}
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fmt.Errorf("reading changes: %w", err)
		}
		name := strings.TrimSuffix(h.Name, "/")
		if name != path.Clean(name) {
			return fmt.Errorf("change %q: not a clean path", h.Name)
		}
		if err := check(name); err != nil {
			return err
		}
		if err := mkdirParent(ws, name); err != nil {
			return err
		}
		if fi, err := ws.Lstat(name); err == nil && (fi.IsDir() || h.Typeflag == tar.TypeSymlink || fi.Mode()&fs.ModeSymlink != 0) {
			if err := ws.RemoveAll(name); err != nil {
				return err
			}
		}
		switch h.Typeflag {
		case tar.TypeReg:
			f, err := ws.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|oNoFollow, fs.FileMode(h.Mode).Perm())
			if err != nil {
				return err
			}
			_, err = io.Copy(f, tr)
			if cerr := f.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
			if err := ws.Chmod(name, fs.FileMode(h.Mode).Perm()); err != nil {
				return err
			}
		case tar.TypeSymlink:
			if err := ws.Symlink(h.Linkname, name); err != nil {
				return err
			}
		default:
			return fmt.Errorf("change %q: unsupported type %q", h.Name, h.Typeflag)
		}
	}
	for _, m := range req.Modes {
		if err := check(m.Path); err != nil {
			return err
		}
		if fi, err := ws.Lstat(m.Path); err != nil || fi.Mode()&fs.ModeSymlink != 0 {
			continue // a symlink's mode is not its own; a path since deleted has none
		}
		if err := ws.Chmod(m.Path, fs.FileMode(m.Mode).Perm()); err != nil {
			return err
		}
	}
	return nil
}

// freeze (scan staging, the host rung) copies the workspace into each
// branch's dirs, and the baseline into each one's origin. There is no
// isolation to quiesce on this rung: a process the session left running in
// the background may write during the copy (docs/api.md says so).
func (st *scanStaging) freeze(req *wire.Fork, _ *wire.Forked) error {
	for _, c := range req.Copies {
		for _, cp := range []struct {
			src *os.Root
			dst string
		}{{st.wsR, c.Workspace}, {st.wsR, c.Baseline}, {st.baseR, c.Origin}} {
			dr, err := os.OpenRoot(cp.dst)
			if err != nil {
				return err
			}
			err = copyRoot(cp.src, dr)
			dr.Close()
			if err != nil {
				return fmt.Errorf("copying %s: %w", cp.src.Name(), err)
			}
		}
	}
	return nil
}

// adopt: the host filled the workspace and baseline before the guest
// started; the stat index is built over them.
func (st *scanStaging) adopt(req *wire.ForkAdopt) error {
	st.origin = req.Origin
	return st.reindex()
}

// adoptStream starts a branch from its parent's trees, pushed as one
// stream (gvisor: the parent's streamFork): the first treeBytes are the
// parent's workspace, which becomes this workspace and its baseline (the
// fork point), the rest the parent's baseline, kept as the origin beside
// the baseline, where commands cannot reach it either.
func (s *session) adoptStream(r io.Reader, treeBytes int64) error {
	st, ok := s.st.(*scanStaging)
	if !ok {
		return fmt.Errorf("the %s staging cannot adopt a pushed tree", s.st.name())
	}
	if err := clearRoot(st.wsR); err != nil {
		return err
	}
	tree := io.LimitReader(r, treeBytes)
	if err := extractRoot(tree, st.wsR); err != nil {
		return fmt.Errorf("the parent's workspace: %w", err)
	}
	io.Copy(io.Discard, tree)
	if err := st.rebase(); err != nil {
		return err
	}
	st.dropOrigin()
	origin := filepath.Join(filepath.Dir(st.base), "origin")
	if err := os.Mkdir(origin, 0o755); err != nil {
		return err
	}
	st.origin, st.ownOrigin = origin, true
	if err := extractTar(r, origin); err != nil {
		st.dropOrigin()
		return fmt.Errorf("the parent's baseline: %w", err)
	}
	return nil
}

// dropOrigin forgets the origin, removing it where it is the guest's own
// (gvisor: on the session's tmpfs; the host rung's host dirs are the
// host's).
func (st *scanStaging) dropOrigin() {
	if st.ownOrigin {
		os.RemoveAll(st.origin)
	}
	st.origin, st.ownOrigin = "", false
}

func (st *scanStaging) originDiff() (*wire.Diff, error) {
	if st.origin == "" {
		return nil, errNoOrigin
	}
	or, err := os.OpenRoot(st.origin)
	if err != nil {
		return nil, err
	}
	defer or.Close()
	w := newWSDiffer(st.wsR, or, true)
	if err := w.children(""); err != nil {
		return nil, err
	}
	return w.result(), nil
}

// errNoOrigin: the session was not forked, or was replaced since.
var errNoOrigin = errors.New("no origin: the session is not a fork (or its tree was replaced since)")

// rehome rewrites the parent's workspace path from to this one's, ws, in
// each of vals (a cwd, environment entries: HOME, DRYEXEC_WORKSPACE, a PATH
// entry): on the host rung a branch's workspace is another directory.
func rehome(vals []string, from, ws string) []string {
	if from == "" || from == ws {
		return vals
	}
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = strings.ReplaceAll(v, from, ws)
	}
	return out
}
