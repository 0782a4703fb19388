package host

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/fsdelta"
	"github.com/dryexec/dryexec/wire"
)

// copied is what copyTree left out of the copy, and why.
type copied struct {
	// skip holds the paths (relative, slash-separated) the copy does not
	// have as the original does: sockets and devices (left out), mount
	// points (copied as empty dirs), what could not be read. The walk
	// neither reports them deleted nor looks beneath them.
	skip     map[string]bool
	warnings []string
}

// copyTree copies the tree at src to dst (which must not exist) as the
// host has it: kinds, contents, modes, owners (as root; rootless the
// caller owns the copy), mtimes, symlinks, fifos, and hard links within the
// tree. It does not cross into other filesystems: a mount point beneath src
// is copied as an empty dir, and said so.
func copyTree(src, dst string) (*copied, error) {
	c := &copied{skip: map[string]bool{}}
	var top unix.Stat_t
	if err := unix.Stat(src, &top); err != nil {
		return nil, err
	}
	links := map[[2]uint64]string{} // (dev, ino) of a file with links → its copy
	type dirTimes struct {
		path string
		st   unix.Stat_t
	}
	var dirs []dirTimes
	root := os.Geteuid() == 0
	err := filepath.WalkDir(src, func(p string, de fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(src, p)
		if err != nil {
			if rel == "." {
				return err
			}
			c.leave(rel, err.Error())
			return nil
		}
		t := filepath.Join(dst, rel)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			c.leave(rel, err.Error())
			return nil
		}
		mode := uint32(st.Mode & 07777)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if err := os.Mkdir(t, 0o700); err != nil {
				return err
			}
			dirs = append(dirs, dirTimes{t, st})
			if st.Dev != top.Dev {
				c.skip[filepath.ToSlash(rel)] = true
				c.warnings = append(c.warnings, fmt.Sprintf("%s is a mount point beneath the working directory: the host rung copied it empty, and what the command did beneath it is not in the delta", p))
				return filepath.SkipDir
			}
			return nil
		case unix.S_IFLNK:
			l, err := os.Readlink(p)
			if err != nil {
				c.leave(rel, err.Error())
				return nil
			}
			if err := os.Symlink(l, t); err != nil {
				return err
			}
		case unix.S_IFIFO:
			if err := unix.Mkfifo(t, 0o600); err != nil {
				return err
			}
		case unix.S_IFREG:
			key := [2]uint64{st.Dev, st.Ino}
			if first, ok := links[key]; ok && st.Nlink > 1 {
				return os.Link(first, t)
			}
			if err := copyFile(p, t); err != nil {
				if errors.Is(err, fs.ErrPermission) {
					c.leave(rel, err.Error())
					return nil
				}
				return err
			}
			if st.Nlink > 1 {
				links[key] = t
			}
		default:
			c.leave(rel, "a socket or device node is not copied")
			return nil
		}
		return finish(t, &st, mode, root)
	})
	if err != nil {
		return nil, err
	}
	// Dirs last, deepest first: what was made in them moved their mtimes.
	for _, d := range slices.Backward(dirs) {
		if err := finish(d.path, &d.st, uint32(d.st.Mode&07777), root); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// leave records rel as left out of the copy.
func (c *copied) leave(rel, why string) {
	c.skip[filepath.ToSlash(rel)] = true
	c.warnings = append(c.warnings, fmt.Sprintf("not copied for the host rung: %s: %s (not in the delta)", rel, why))
}

// finish gives the copy at t the original's owner (as root), mode and times.
// The owner goes first: a chown clears setuid and setgid.
func finish(t string, st *unix.Stat_t, mode uint32, root bool) error {
	if root {
		if err := unix.Lchown(t, int(st.Uid), int(st.Gid)); err != nil {
			return err
		}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFLNK {
		if err := unix.Chmod(t, mode); err != nil {
			return err
		}
	}
	ts := []unix.Timespec{st.Atim, st.Mtim}
	return unix.UtimesNanoAt(unix.AT_FDCWD, t, ts, unix.AT_SYMLINK_NOFOLLOW)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	// io.Copy between two files is copy_file_range: a reflink where the
	// filesystem has them.
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// walker reports what the command changed in the copy (root) to the Differ,
// as a guest reports an overlay's upper dir: pre-order, names sorted, every
// reported path's parent dir reported first, a deleted name as a whiteout.
// Only what has a ctime at or after since, or whose kind is not the
// original's, is compared with the host; a dir is listed against the
// original's only when its own ctime says its names may have changed.
type walker struct {
	root, orig string
	since      unix.Timespec
	skip       map[string]bool
	differ     *fsdelta.Differ
	// pending are the dirs above the current path not yet reported: an
	// entry's ancestors are reported just before it.
	pending []*wire.FSEntry
}

// dir walks the copy's dir rel ("" for the root); all says everything
// beneath it is new (the original has no dir there).
func (w *walker) dir(rel string, all bool) error {
	names, err := readNames(filepath.Join(w.root, rel))
	if err != nil {
		return err
	}
	var self unix.Stat_t
	if err := unix.Lstat(filepath.Join(w.root, rel), &self); err != nil {
		return err
	}
	have := map[string]bool{}
	for _, n := range names {
		have[n] = true
	}
	if !all && notBefore(self.Ctim, w.since) {
		// Its names may have changed: a name of the original's gone from
		// the copy was deleted (or renamed away).
		orig, err := readNames(filepath.Join(w.orig, rel))
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		for _, n := range orig {
			if !have[n] && !w.skip[join(rel, n)] {
				names = append(names, n)
			}
		}
		slices.Sort(names)
	}
	for _, n := range names {
		p := join(rel, n)
		if !have[n] {
			if err := w.report(&wire.FSEntry{Path: p, Kind: wire.EntryWhiteout}, nil); err != nil {
				return err
			}
			continue
		}
		if err := w.entry(p, all); err != nil {
			return err
		}
	}
	return nil
}

// entry looks at one path of the copy.
func (w *walker) entry(p string, all bool) error {
	cp := filepath.Join(w.root, p)
	var st unix.Stat_t
	if err := unix.Lstat(cp, &st); err != nil {
		return err
	}
	var ost unix.Stat_t
	oerr := unix.Lstat(filepath.Join(w.orig, p), &ost)
	sameKind := oerr == nil && ost.Mode&unix.S_IFMT == st.Mode&unix.S_IFMT
	changed := all || !sameKind || notBefore(st.Ctim, w.since)
	e := &wire.FSEntry{Path: p, Mode: st.Mode & 07777, UID: int(st.Uid), GID: int(st.Gid), MtimeNS: st.Mtim.Nano()}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		e.Kind = wire.EntryDir
		if w.skip[p] {
			return nil
		}
		w.pending = append(w.pending, e)
		mark := len(w.pending)
		if changed {
			if err := w.flush(); err != nil {
				return err
			}
		}
		err := w.dir(p, all || !sameKind)
		if len(w.pending) >= mark {
			w.pending = w.pending[:mark-1] // nothing beneath it changed
		}
		return err
	case unix.S_IFREG:
		e.Kind, e.Size = wire.EntryFile, st.Size
	case unix.S_IFLNK:
		e.Kind = wire.EntrySymlink
		l, err := os.Readlink(cp)
		if err != nil {
			return err
		}
		e.Link = l
	case unix.S_IFIFO:
		e.Kind = wire.EntryFIFO
	default:
		e.Kind = wire.EntryOther
	}
	if !changed {
		return nil
	}
	if st.Nlink > 1 {
		e.Ino, e.Nlink = st.Ino, uint32(st.Nlink)
	}
	if e.Kind != wire.EntryFile {
		return w.report(e, nil)
	}
	f, err := os.OpenFile(cp, os.O_RDONLY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	return w.report(e, f)
}

// flush reports the pending dirs, outermost first.
func (w *walker) flush() error {
	for _, d := range w.pending {
		if err := w.differ.Add(d, nil); err != nil {
			return err
		}
	}
	w.pending = w.pending[:0]
	return nil
}

func (w *walker) report(e *wire.FSEntry, content io.Reader) error {
	if err := w.flush(); err != nil {
		return err
	}
	return w.differ.Add(e, content)
}

func join(dir, name string) string {
	if dir == "" {
		return name
	}
	return dir + "/" + name
}

// readNames lists dir's names, sorted.
func readNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	names, err := f.Readdirnames(-1)
	slices.Sort(names)
	return names, err
}
