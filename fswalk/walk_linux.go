package fswalk

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"github.com/dryexec/dryexec/wire"
	"golang.org/x/sys/unix"
)

// overlayXattrs are the names overlayfs marks its state with in one namespace:
// trusted.overlay.* by default, user.overlay.* when mounted with userxattr
// (always, inside a user namespace).
type overlayXattrs struct {
	opaque, whiteout string
	// An upper entry with one of these does not hold what the merged view shows:
	// a redirected dir (redirect_dir=on) takes its children from another lower
	// path, and a metacopy file (metacopy=on) has its data in the lower. A
	// metacopy file cannot be reported as an Entry, so the walk refuses it
	// rather than report a chmod-ed file as a sparse file of zeros; a redirect
	// is reported (Entry.Redirect) only where the overlay was mounted with
	// redirect_dir=on (WalkOptions.Redirects), and refused elsewhere.
	redirect, metacopy string
}

func xattrsFor(prefix string) overlayXattrs {
	return overlayXattrs{
		opaque: prefix + "opaque", whiteout: prefix + "whiteout",
		redirect: prefix + "redirect", metacopy: prefix + "metacopy",
	}
}

var (
	trustedXattrs = xattrsFor("trusted.overlay.")
	userXattrs    = xattrsFor("user.overlay.")
)

// WalkOptions say how the overlay whose upper is walked was mounted.
type WalkOptions struct {
	// UserXattr: mounted with userxattr, so its markers are user.overlay.*
	// (else trusted.overlay.*). Only that namespace is read. The other one is
	// ordinary data the sandbox may set on its own files (nothing guards
	// user.* on a trusted.* overlay), so reading it would let a command forge
	// whiteouts and opaque dirs: deletions of host files it never deleted.
	UserXattr bool
	// Redirects: mounted with redirect_dir=on, so a renamed dir's redirect
	// xattr was set by the overlay itself and is reported (Entry.Redirect).
	// Without it the walk refuses an upper that holds one, as the overlay
	// would not follow it either. Never with UserXattr: overlayfs refuses
	// redirect_dir=on with userxattr, and the command may write user.*.
	Redirects bool
}

// WalkUpper walks the overlay upper dir at root with WalkOptions{UserXattr:
// userXattr}; see Walk.
func WalkUpper(root string, mount int, userXattr bool, emit func(e *wire.FSEntry, content *os.File) error) error {
	return Walk(root, mount, WalkOptions{UserXattr: userXattr}, emit)
}

// Walk walks the overlay upper dir at root (pre-order, names sorted) and calls
// emit for each entry. For files, content is open for reading and positioned at
// 0; emit must not keep it past its return. The root itself is not reported.
//
// Every system call takes a directory fd and one name, never a path, so a tree
// of any depth is walked (a path deeper than PATH_MAX fails with ENAMETOOLONG
// in a path-based call); at most maxWalkFDs directory fds are open at a time.
// The upper must not change meanwhile (in a trial, every process that could
// change it is dead): an ancestor whose fd was closed is reopened through
// ".." and must be the same dir.
func Walk(root string, mount int, o WalkOptions, emit func(e *wire.FSEntry, content *os.File) error) error {
	if o.Redirects && o.UserXattr {
		return errors.New("fsdelta: redirects are never honoured on a userxattr overlay")
	}
	w := &walker{mount: mount, x: trustedXattrs, redirects: o.Redirects, emit: emit}
	if o.UserXattr {
		w.x = userXattrs
	}
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening upper dir: %w", err)
	}
	top, err := newFrame(fd, "", "", true)
	if err != nil {
		return err
	}
	return w.run(top)
}

// maxWalkFDs bounds the directory fds the walk holds: the innermost ones
// along the current path.
const maxWalkFDs = 32

type walker struct {
	mount     int
	x         overlayXattrs
	redirects bool
	emit      func(*wire.FSEntry, *os.File) error
}

// frame is one directory on the walk's current path.
type frame struct {
	fd    int // -1 while closed to bound the fds held
	rel   string
	names []string
	next  int
	dev   uint64
	ino   uint64
	// lower is the path in the lower layer whose entries the merged dir
	// shows beneath the upper's: rel itself unless a redirect (of this dir or
	// an ancestor) says otherwise; hasLower is false below an opaque dir.
	lower    string
	hasLower bool
}

func newFrame(fd int, rel, lower string, hasLower bool) (*frame, error) {
	f := &frame{fd: fd, rel: rel, lower: lower, hasLower: hasLower}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("stat upper dir %q: %w", rel, err)
	}
	f.dev, f.ino = st.Dev, st.Ino
	names, err := ReadDirNames(fd)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("reading upper dir %q: %w", rel, err)
	}
	f.names = names
	return f, nil
}

func (w *walker) run(top *frame) error {
	stack := []*frame{top}
	defer func() {
		for _, f := range stack {
			if f.fd >= 0 {
				unix.Close(f.fd)
			}
		}
	}()
	for len(stack) > 0 {
		f := stack[len(stack)-1]
		if f.next == len(f.names) {
			stack = stack[:len(stack)-1]
			if len(stack) > 0 {
				if p := stack[len(stack)-1]; p.fd < 0 {
					if err := reopenParent(p, f.fd); err != nil {
						unix.Close(f.fd)
						return err
					}
				}
			}
			unix.Close(f.fd)
			continue
		}
		name := f.names[f.next]
		f.next++
		child, err := w.one(f, name)
		if err != nil {
			return err
		}
		if child != nil {
			stack = append(stack, child)
			if n := len(stack) - 1 - maxWalkFDs; n >= 0 && stack[n].fd >= 0 {
				unix.Close(stack[n].fd)
				stack[n].fd = -1
			}
		}
	}
	return nil
}

// reopenParent reopens p, whose fd was closed, as ".." of its child's fd.
func reopenParent(p *frame, childFD int) error {
	fd, err := unix.Openat(childFD, "..", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("reopening upper dir %q: %w", p.rel, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Dev != p.dev || st.Ino != p.ino {
		unix.Close(fd)
		return fmt.Errorf("upper dir %q changed during the walk", p.rel)
	}
	p.fd = fd
	return nil
}

// one reports entry name of dir f; for a dir it returns the frame to walk next.
func (w *walker) one(f *frame, name string) (*frame, error) {
	rel := name
	if f.rel != "" {
		rel = f.rel + "/" + name
	}
	var st unix.Stat_t
	if err := unix.Fstatat(f.fd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return nil, fmt.Errorf("stat %q: %w", rel, err)
	}
	e := &wire.FSEntry{Mount: w.mount, Path: rel, Mode: st.Mode & 07777, UID: int(st.Uid), GID: int(st.Gid),
		MtimeNS: st.Mtim.Nano()}
	if st.Nlink > 1 && st.Mode&unix.S_IFMT != unix.S_IFDIR {
		// Whiteouts share one inode too (overlayfs links them): cleared below.
		e.Ino, e.Nlink = st.Ino, uint32(st.Nlink)
	}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		fd, err := unix.Openat(f.fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("opening upper dir %q: %w", rel, err)
		}
		e.Kind = wire.EntryDir
		e.Opaque = fxattrIs(fd, w.x.opaque, "y")
		lower, hasLower, err := w.lowerOf(fd, f, name, e)
		if err != nil {
			unix.Close(fd)
			return nil, err
		}
		if err := w.emit(e, nil); err != nil {
			unix.Close(fd)
			return nil, err
		}
		return newFrame(fd, rel, lower, hasLower)
	case unix.S_IFCHR:
		if st.Rdev == 0 {
			e.Kind, e.Ino, e.Nlink, e.MtimeNS = wire.EntryWhiteout, 0, 0, 0
		} else {
			e.Kind = wire.EntryOther
		}
	case unix.S_IFIFO:
		e.Kind = wire.EntryFIFO
	case unix.S_IFLNK:
		e.Kind = wire.EntrySymlink
		l, err := Readlinkat(f.fd, name)
		if err != nil {
			return nil, fmt.Errorf("readlink %q: %w", rel, err)
		}
		e.Link = l
	case unix.S_IFREG:
		fd, err := unix.Openat(f.fd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("opening %q: %w", rel, err)
		}
		file := os.NewFile(uintptr(fd), rel)
		defer file.Close()
		if st.Size == 0 && fxattrIs(fd, w.x.whiteout, "") {
			e.Kind, e.Ino, e.Nlink, e.MtimeNS = wire.EntryWhiteout, 0, 0, 0
			break
		}
		if fxattrIs(fd, w.x.metacopy, "") || fxattrIs(fd, w.x.redirect, "") {
			return nil, fmt.Errorf("upper file %q is metadata only (overlay metacopy=on is not supported)", rel)
		}
		e.Kind = wire.EntryFile
		e.Size = st.Size
		return nil, w.emit(e, file)
	default:
		e.Kind = wire.EntryOther
	}
	return nil, w.emit(e, nil)
}

// lowerOf returns the lower path whose entries the merged dir name (open as
// fd) of f shows, and sets e.Redirect when that is not the dir's own path.
//
// The overlay's redirect is honoured only where it was mounted with
// redirect_dir=on, and then its xattr namespace (trusted.*) is one the
// command cannot write; the path it names is checked to stay within the
// lower. The host reads that path beneath the same mount only (Differ).
func (w *walker) lowerOf(fd int, f *frame, name string, e *wire.FSEntry) (string, bool, error) {
	natural := name
	if f.lower != "" {
		natural = f.lower + "/" + name
	}
	if e.Opaque {
		// An opaque dir shows nothing of the lower: a redirect on it
		// (which overlayfs does not follow either) changes nothing.
		return natural, false, nil
	}
	r, ok, err := fgetxattrString(fd, w.x.redirect)
	if err != nil {
		return "", false, fmt.Errorf("reading the redirect of upper dir %q: %w", e.Path, err)
	}
	if !ok {
		return natural, f.hasLower, nil
	}
	if !w.redirects {
		return "", false, fmt.Errorf("upper dir %q is redirected (overlay redirect_dir=on is not supported)", e.Path)
	}
	var lower string
	switch {
	case strings.HasPrefix(r, "/"):
		// Absolute: from the root of the lower layer.
		lower = r[1:]
	case !f.hasLower || strings.Contains(r, "/"):
		return "", false, fmt.Errorf("upper dir %q has a bad relative redirect %q", e.Path, r)
	case f.lower == "":
		lower = r
	default:
		// Relative: a name in the lower dir the parent shows.
		lower = f.lower + "/" + r
	}
	if err := wire.CheckRelPath(lower); err != nil || path.Clean(lower) != lower {
		return "", false, fmt.Errorf("upper dir %q has a bad redirect %q", e.Path, r)
	}
	if lower != natural || !f.hasLower {
		e.Redirect = lower
	}
	return lower, true, nil
}

// fxattrIs reports whether xattr name is set on fd (with value want, unless want
// is empty, which accepts any value).
func fxattrIs(fd int, name, want string) bool {
	var buf [8]byte
	sz, err := unix.Fgetxattr(fd, name, buf[:])
	if err != nil {
		return errors.Is(err, unix.ERANGE) && want == ""
	}
	return want == "" || string(buf[:sz]) == want
}

// fgetxattrString returns xattr name of fd, and whether it is set.
func fgetxattrString(fd int, name string) (string, bool, error) {
	buf := make([]byte, 256)
	for {
		sz, err := unix.Fgetxattr(fd, name, buf)
		switch {
		case err == nil:
			return string(buf[:sz]), true, nil
		case errors.Is(err, unix.ENODATA):
			return "", false, nil
		case errors.Is(err, unix.ERANGE) && len(buf) < 1<<20:
			buf = make([]byte, 4*len(buf))
		default:
			return "", false, err
		}
	}
}
