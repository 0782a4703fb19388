package guest

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/dryexec/dryexec/wire"
)

// staging keeps a workspace and its baseline.
type staging interface {
	name() string // overlay | scan
	// diff reports what changed since the baseline.
	diff() (*wire.Diff, error)
	// rebase makes the current state the baseline.
	rebase() error
	// reset puts the workspace back to the baseline.
	reset() error
	// replace empties workspace and baseline and fills both from a tar stream.
	replace(r io.Reader) error
}

// session is the guest side of one session. Host requests are served one at a
// time (mu); guest→host calls go out through peer while one is running.
type session struct {
	mu    sync.Mutex // serialises host requests; guards the fields below
	cfg   wire.SessionStart
	st    staging
	shell shellState
	ws    string // the workspace as processes see it
	peer  *wire.Peer
	// push collects a tree being pushed (push_tree.begin … end).
	push *bytes.Buffer
	// platform holds what the ns rung adds (nil on the host rung). Only
	// Linux code reads it: elsewhere its type is empty.
	platform *sessionPlatform //lint:ignore U1000 read by session_linux.go only
	// runner is the pre-started python runner waiting for the next
	// exec_python, or nil; pyClosed: the session is ending, start no more
	// (python_prestart_unix.go).
	runner   *runnerProc
	pyClosed bool
	// pyUsed: an exec_python ran (or SessionStart.PythonWarm): only then is
	// a runner pre-started, so that a session that never runs Python keeps
	// no idle interpreter.
	pyUsed bool
	// prestarting delivers the runner being started in the background (nil
	// if it failed), or is nil; a request takes it before anything else.
	prestarting chan *runnerProc
	// vm is what a vm session keeps to park (vmpark_linux.go); nil elsewhere.
	vm *vmPark //lint:ignore U1000 read by vmpark_linux.go only
}

func runSession() int {
	conn := wire.NewConn(os.NewFile(wire.CtrlFD, "ctrl"))
	if err := conn.Send(wire.KindHello, "", 0, &wire.Hello{Version: wire.Version, Role: wire.RoleSession}); err != nil {
		return 1
	}
	s := &session{}
	s.peer = wire.NewPeer(conn, s.handle)
	s.peer.Run(context.Background())
	s.mu.Lock()
	s.closePython()
	s.mu.Unlock()
	s.close()
	return 0
}

func remote(code, format string, a ...any) error {
	return &wire.RemoteError{Code: code, Message: fmt.Sprintf(format, a...)}
}

func (s *session) handle(ctx context.Context, f *wire.Frame) (any, [][]byte, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	// The last request's pre-started runner is forked before this one starts
	// anything of its own.
	s.awaitPrestart()
	if s.st == nil && f.Verb != wire.VerbSessionStart {
		return nil, nil, remote("not_started", "%s before session.start", f.Verb)
	}
	if fl, ok := s.st.(flattener); ok {
		landed, err := fl.landFlattenedNow()
		if landed || err != nil {
			// A waiting runner saw the workspace before the new mount.
			s.dropRunner()
			defer s.prestartPython()
		}
		if err != nil {
			return nil, nil, remote("flatten", "merging the workspace's layers: %v", err)
		}
	}
	switch f.Verb {
	case wire.VerbSessionStart:
		if s.st != nil {
			return nil, nil, remote("protocol", "session.start twice")
		}
		if err := f.Decode(&s.cfg); err != nil {
			return nil, nil, err
		}
		if len(f.Bin) > 0 {
			s.cfg.TrustBundle = f.Bin[0]
		}
		if err := s.start(); err != nil {
			return nil, nil, remote("setup", "%v", err)
		}
		sh, err := resolveShell(s.cfg.Shell)
		if err != nil {
			return nil, nil, remote("setup", "%v", err)
		}
		s.shell.path = sh
		// Code that must find the workspace after a cd (a build script, a
		// test fixture) reads it from the environment, on every rung alike.
		s.shell.env = append(slices.DeleteFunc(slices.Clone(s.shell.env), func(kv string) bool {
			return strings.HasPrefix(kv, wire.WorkspaceEnv+"=")
		}), wire.WorkspaceEnv+"="+s.ws)
		// The view is ready: the first exec_python's runner can start, if
		// the session asked for it warm (otherwise it starts with the
		// first exec_python: an interpreter costs ~9 MiB idle).
		if s.cfg.PythonWarm {
			s.pyUsed = true
		}
		s.prestartPython()
		// Started before the answer, not beside it: on the answer the
		// host moves this process's threads out of the session's cgroup
		// but the launcher (cgroup.Group.ShelterThreads), and a process
		// the launcher forked in that moment would be born outside the
		// limits, with everything it starts (TestWarmRunnerInSessionGroup).
		s.awaitPrestart()
		return s.ping(), nil, nil
	case wire.VerbPing:
		return s.ping(), nil, nil
	case wire.VerbExecShell:
		var req wire.ExecShell
		if err := f.Decode(&req); err != nil {
			return nil, nil, err
		}
		// A result can exceed a frame header (transcript, stdout and stderr
		// are each up to OutputCap): it may ride as attachments.
		body, bin, err := wire.EncodeBody(s.execShell(ctx, &req))
		if err != nil {
			return nil, nil, remote("exec_shell", "encoding the result: %v", err)
		}
		return body, bin, nil
	case wire.VerbExecPython:
		var req wire.ExecPython
		if err := wire.DecodeBody(f, &req, false); err != nil {
			return nil, nil, err
		}
		res, err := s.execPython(ctx, &req)
		if err != nil {
			return nil, nil, err
		}
		body, bin, err := encodeResult(res)
		if err != nil {
			return nil, nil, remote("exec_python", "encoding the result: %v", err)
		}
		return body, bin, nil
	case wire.VerbPullDiff:
		var req wire.PullDiff
		if err := f.Decode(&req); err != nil {
			return nil, nil, err
		}
		if req.Rebase {
			// Nothing of the sandbox runs between the diff and the fold
			// (a daemon's write there would be folded unseen).
			resume := s.quiesce()
			defer resume()
		}
		d, err := s.st.diff()
		if err != nil {
			return nil, nil, remote("diff", "%v", err)
		}
		if req.Rebase {
			if err := s.st.rebase(); err != nil {
				return nil, nil, remote("rebase", "%v", err)
			}
		}
		return d, nil, nil
	case wire.VerbReadFile:
		var req wire.ReadFile
		if err := f.Decode(&req); err != nil {
			return nil, nil, err
		}
		b, err := s.readFile(req)
		if err != nil {
			return nil, nil, remote("read_file", "%v", err)
		}
		return nil, [][]byte{b}, nil
	case wire.VerbReset:
		// The waiting runner goes (it may have seen the workspace as it
		// was); the next one starts after.
		s.dropRunner()
		defer s.prestartPython()
		if err := s.st.reset(); err != nil {
			return nil, nil, remote("reset", "%v", err)
		}
		return nil, nil, nil
	case wire.VerbPushBegin:
		s.push = new(bytes.Buffer)
		return nil, nil, nil
	case wire.VerbPushData:
		if s.push == nil {
			return nil, nil, remote("protocol", "push_tree.data without begin")
		}
		for _, b := range f.Bin {
			s.push.Write(b)
		}
		return nil, nil, nil
	case wire.VerbPushEnd:
		if s.push == nil {
			return nil, nil, remote("protocol", "push_tree.end without begin")
		}
		s.dropRunner()
		defer s.prestartPython()
		err := s.st.replace(s.push)
		s.push = nil
		s.shell.cwd = s.ws
		if err != nil {
			return nil, nil, remote("push_tree", "%v", err)
		}
		return nil, nil, nil
	case wire.VerbFork, wire.VerbForkAdopt, wire.VerbPullOriginDiff, wire.VerbApplyEnd:
		return s.handleFork(ctx, f)
	case wire.VerbSessionPark:
		s.dropRunner()
		if err := s.parkVM(); err != nil {
			return nil, nil, remote("park", "%v", err)
		}
		return nil, nil, nil
	case wire.VerbSessionUnpark:
		var req wire.SessionUnpark
		if err := f.Decode(&req); err != nil {
			return nil, nil, err
		}
		if err := s.unparkVM(req.WallNS); err != nil {
			return nil, nil, remote("unpark", "%v", err)
		}
		if req.Branch {
			if err := s.branchVM(); err != nil {
				return nil, nil, remote("unpark", "%v", err)
			}
		}
		s.prestartPython()
		return s.ping(), nil, nil
	case wire.VerbShutdown:
		s.closePython()
		s.close()
		go func() { os.Exit(0) }()
		return nil, nil, nil
	}
	return nil, nil, remote("unknown_verb", "unknown verb %q", f.Verb)
}

func (s *session) ping() *wire.Ping {
	return &wire.Ping{Rung: s.cfg.Rung, Staging: s.st.name(), Version: wire.Version, Workspace: s.ws, Python: pythonPath(), Shell: s.shell.path, Renderer: wire.PrintRenderer,
		PythonReady: s.runner != nil}
}

// wsRoot is the workspace as a root (os.Root): the scan staging's, held
// since the session started (the path may have been replaced since by the
// commands), else opened now; done closes what was opened.
func (s *session) wsRoot() (r *os.Root, done func(), err error) {
	if st, ok := s.st.(*scanStaging); ok {
		return st.wsR, func() {}, nil
	}
	if r, err = os.OpenRoot(s.ws); err != nil {
		return nil, nil, err
	}
	return r, func() { r.Close() }, nil
}

// readFile returns one chunk of a workspace file, refusing paths that leave the
// workspace or pass through a symlink.
func (s *session) readFile(req wire.ReadFile) ([]byte, error) {
	if err := checkWSPath(req.Path); err != nil {
		return nil, err
	}
	ws, done, err := s.wsRoot()
	if err != nil {
		return nil, err
	}
	defer done()
	if err := noSymlinkParents(ws, req.Path); err != nil {
		return nil, err
	}
	fi, err := ws.Lstat(req.Path)
	if err != nil {
		return nil, err
	}
	if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", req.Path)
	}
	f, err := ws.OpenFile(req.Path, os.O_RDONLY|oNoFollow|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	// The root keeps the open inside the workspace; that it is the file
	// just looked at (not one a symlink swapped in since points to) is
	// checked here.
	if ofi, err := f.Stat(); err != nil || !os.SameFile(fi, ofi) {
		return nil, fmt.Errorf("%s changed while it was read", req.Path)
	}
	buf := make([]byte, wire.MaxAttachment)
	n, err := f.ReadAt(buf, req.Offset)
	if err != nil && err != io.EOF {
		return nil, err
	}
	return buf[:n], nil
}

func checkWSPath(p string) error {
	if p == "" || strings.HasPrefix(p, "/") || path.Clean(p) != p || p == ".." || strings.HasPrefix(p, "../") || strings.ContainsRune(p, 0) {
		return fmt.Errorf("bad workspace path %q", p)
	}
	return nil
}

// noSymlinkParents fails when a directory on the way from root to rel is a
// symlink (or not a directory). Components that do not exist yet are fine: they
// will be created as real directories. (The root is what keeps every access
// inside; this refuses a tree that names a path through a link at all.)
func noSymlinkParents(root *os.Root, rel string) error {
	dir := ""
	parts := strings.Split(rel, "/")
	for _, c := range parts[:len(parts)-1] {
		dir = path.Join(dir, c)
		fi, err := root.Lstat(dir)
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("%s is not a directory", dir)
		}
	}
	return nil
}

// extractTar unpacks r into dir, which must be empty, refusing any entry that
// would land outside it or pass through a symlink.
func extractTar(r io.Reader, dir string) error {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	return extractRoot(r, root)
}

// extractRoot is extractTar into the root dir: every entry made beneath its
// fd, never through a symlink out of it.
func extractRoot(r io.Reader, dir *os.Root) error {
	tr := tar.NewReader(r)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("reading tree: %w", err)
		}
		// Refuse rather than rewrite: a tree naming ".." or an absolute path
		// was not made from a directory, and silently relocating it would hide that.
		if strings.HasPrefix(h.Name, "/") || slices.Contains(strings.Split(h.Name, "/"), "..") {
			return fmt.Errorf("tree entry %q leaves the workspace", h.Name)
		}
		name := strings.TrimSuffix(strings.TrimPrefix(path.Clean("/"+h.Name), "/"), "/")
		if name == "" {
			continue
		}
		if err := checkWSPath(name); err != nil {
			return err
		}
		if err := noSymlinkParents(dir, name); err != nil {
			return fmt.Errorf("tree entry %q: %w", h.Name, err)
		}
		mode := fs.FileMode(h.Mode).Perm()
		switch h.Typeflag {
		case tar.TypeDir:
			if err := dir.MkdirAll(name, 0o755); err != nil {
				return err
			}
			if err := dir.Chmod(name, mode|0o700); err != nil {
				return err
			}
		case tar.TypeReg:
			if err := mkdirParent(dir, name); err != nil {
				return err
			}
			f, err := dir.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
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
			if err := dir.Chmod(name, mode); err != nil {
				return err
			}
			// Keep the tree's mtimes: the scan index treats files written
			// just now as "racy" and reads them on every diff.
			if !h.ModTime.IsZero() {
				dir.Chtimes(name, h.ModTime, h.ModTime)
			}
		case tar.TypeSymlink:
			if err := mkdirParent(dir, name); err != nil {
				return err
			}
			if err := dir.Symlink(h.Linkname, name); err != nil {
				return err
			}
		default:
			return fmt.Errorf("tree entry %q: unsupported type %q", h.Name, h.Typeflag)
		}
	}
}

// mkdirParent makes rel's parent dirs beneath root, as MkdirAll would.
func mkdirParent(root *os.Root, rel string) error {
	if d := path.Dir(rel); d != "." {
		return root.MkdirAll(d, 0o755)
	}
	return nil
}

// clearRoot removes everything inside r, keeping r: each name by an fd of
// r's, so a symlink a command swapped in is removed, never followed.
func clearRoot(r *os.Root) error {
	ents, err := fs.ReadDir(r.FS(), ".")
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range ents {
		errs = append(errs, r.RemoveAll(e.Name()))
	}
	return errors.Join(errs...)
}

// copyRoot copies src's contents into dst, preserving modes, mtimes and
// symlinks (copied as links, never followed). Each dir is opened beneath
// its parent's fd (os.Root) and every name in it is stat'd, opened and
// created beneath that fd: a symlink a command swaps in for a dir while the
// copy runs cannot take a read or a write outside either tree, as a
// path-based walk's would (an unconfined guest, the seatbelt rung's, would
// then copy a file the commands may not read into the baseline, or write
// one outside the workspace).
func copyRoot(src, dst *os.Root) error {
	ents, err := fs.ReadDir(src.FS(), ".")
	if err != nil {
		return err
	}
	for _, e := range ents {
		name := e.Name()
		info, err := src.Lstat(name)
		if err != nil {
			return err
		}
		switch {
		case info.IsDir():
			if err := dst.Mkdir(name, 0o700); err != nil {
				return err
			}
			if err := dst.Chmod(name, info.Mode().Perm()|0o700); err != nil {
				return err
			}
			if err := inRoots(src, dst, name, copyRoot); err != nil {
				return err
			}
		case info.Mode()&fs.ModeSymlink != 0:
			l, err := src.Readlink(name)
			if err != nil {
				return err
			}
			if err := dst.Symlink(l, name); err != nil {
				return err
			}
		case info.Mode().IsRegular():
			if err := copyFileRoot(src, dst, name, info.Mode()); err != nil {
				return err
			}
			if err := dst.Chtimes(name, info.ModTime(), info.ModTime()); err != nil {
				return err
			}
		}
	}
	return nil
}

// inRoots runs f over the dir name of a and of b, each opened beneath its
// parent's fd (a symlink swapped in for it is followed only while it stays
// beneath the parent), and closes them.
func inRoots(a, b *os.Root, name string, f func(a, b *os.Root) error) error {
	ra, err := a.OpenRoot(name)
	if err != nil {
		return err
	}
	defer ra.Close()
	rb, err := b.OpenRoot(name)
	if err != nil {
		return err
	}
	defer rb.Close()
	return f(ra, rb)
}

// copyFileRoot copies the regular file rel of src to a new file rel of dst.
func copyFileRoot(src, dst *os.Root, rel string, mode fs.FileMode) error {
	// Non-blocking: a fifo swapped in must not hang the guest's open.
	in, err := src.OpenFile(rel, os.O_RDONLY|oNoFollow|syscall.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer in.Close()
	if fi, err := in.Stat(); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("%s is no longer a regular file", rel)
	}
	out, err := dst.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode.Perm())
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if err == nil {
		err = out.Chmod(mode.Perm())
	}
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// scanStaging keeps a full copy of the baseline and compares whole trees: the
// host rung's staging, which needs nothing from the kernel. Like git's index, it
// remembers each workspace file's stat as of the baseline, so a diff reads only
// the files whose stat changed.
//
// The workspace is the commands' to shape while the guest reads and writes
// it, and on the seatbelt rung the guest is not confined as they are: every
// access goes through wsR and baseR, the two dirs opened once when the
// session starts (os.Root), so a symlink in the workspace, or swapped in for
// one of its dirs or for the workspace itself, never takes the guest outside.
type scanStaging struct {
	ws, base   string
	wsR, baseR *os.Root
	index      statIndex
	// origin holds the parent's baseline of a forked session ("": none);
	// ownOrigin says the guest made it (and removes it when it goes).
	origin    string
	ownOrigin bool
}

// newScanStaging opens the workspace ws and the baseline base.
func newScanStaging(ws, base string) (*scanStaging, error) {
	wsR, err := os.OpenRoot(ws)
	if err != nil {
		return nil, fmt.Errorf("the workspace: %w", err)
	}
	baseR, err := os.OpenRoot(base)
	if err != nil {
		wsR.Close()
		return nil, fmt.Errorf("the baseline: %w", err)
	}
	return &scanStaging{ws: ws, base: base, wsR: wsR, baseR: baseR}, nil
}

func (st *scanStaging) name() string { return "scan" }

func (st *scanStaging) diff() (*wire.Diff, error) {
	w := newWSDiffer(st.wsR, st.baseR, true)
	w.unchanged = st.index.unchanged
	if err := w.children(""); err != nil {
		return nil, err
	}
	return w.result(), nil
}

func (st *scanStaging) rebase() error {
	if err := clearRoot(st.baseR); err != nil {
		return err
	}
	if err := copyRoot(st.wsR, st.baseR); err != nil {
		return err
	}
	return st.reindex()
}

func (st *scanStaging) reset() error {
	if err := clearRoot(st.wsR); err != nil {
		return err
	}
	if err := copyRoot(st.baseR, st.wsR); err != nil {
		return err
	}
	return st.reindex()
}

func (st *scanStaging) replace(r io.Reader) error {
	if err := clearRoot(st.baseR); err != nil {
		return err
	}
	st.dropOrigin()
	if err := extractRoot(r, st.baseR); err != nil {
		// Like the overlay staging: a refused tree leaves an empty workspace.
		clearRoot(st.baseR)
		st.reset()
		return err
	}
	return st.reset()
}

func (st *scanStaging) reindex() error {
	idx, err := buildStatIndex(st.wsR)
	st.index = idx
	return err
}
