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

	"github.com/dryexec/dryexec/fswalk"
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

// original is the baseline of the copy (fswalk.WalkTree): the tree it was
// copied from, and the ctime the copy's end left (since). A path of the
// copy is compared with the host only when its ctime is at or after since,
// or its kind is not the original's; a dir is listed against the
// original's only when its own ctime says its names may have changed.
type original struct {
	orig  string
	since int64
	skip  map[string]bool
}

func (o original) Changed(rel string, st fswalk.Stat) (changed, hadDir bool) {
	ost, err := fswalk.Lstat(filepath.Join(o.orig, rel))
	sameKind := err == nil && ost.Kind() == st.Kind()
	return !sameKind || st.CtimeNS >= o.since, sameKind && st.Kind() == unix.S_IFDIR
}

func (o original) Names(rel string) ([]string, error) {
	names, err := fswalk.ReadNames(filepath.Join(o.orig, rel))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return names, err
}

func (o original) Skip(rel string) bool { return o.skip[rel] }
