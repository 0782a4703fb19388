package fsdelta

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"golang.org/x/sys/unix"
)

// overlayXattrs are the names overlayfs marks its state with in one namespace:
// trusted.overlay.* by default, user.overlay.* when mounted with userxattr
// (always, inside a user namespace).
type overlayXattrs struct {
	opaque, whiteout string
	// An upper entry with one of these does not hold what the merged view shows:
	// a redirected dir (redirect_dir=on) takes its children from another lower
	// path, and a metacopy file (metacopy=on) has its data in the lower. Neither
	// can be reported as an Entry, so the walk refuses them rather than report a
	// renamed dir as empty or a chmod-ed file as a sparse file of zeros.
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

// WalkUpper walks the overlay upper dir at root (pre-order, names sorted) and calls
// emit for each entry. For files, content is open for reading and positioned at 0;
// emit must not keep it past its return. The root itself is not reported.
//
// userXattr must say which xattr namespace the overlay was mounted with: false for
// trusted.overlay.* (the default), true for user.overlay.* (the userxattr option).
// Only that namespace is read. The other one is ordinary data the sandbox may set
// on its own files (nothing guards user.* on a trusted.* overlay), so reading it
// would let a command forge whiteouts and opaque dirs: deletions of host files it
// never deleted.
func WalkUpper(root string, mount int, userXattr bool, emit func(e *Entry, content *os.File) error) error {
	w := &walker{mount: mount, x: trustedXattrs, emit: emit}
	if userXattr {
		w.x = userXattrs
	}
	return w.dir(root, "")
}

type walker struct {
	mount int
	x     overlayXattrs
	emit  func(*Entry, *os.File) error
}

func (w *walker) dir(abs, rel string) error {
	d, err := os.Open(abs)
	if err != nil {
		return fmt.Errorf("opening upper dir: %w", err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return fmt.Errorf("reading upper dir %q: %w", rel, err)
	}
	slices.Sort(names)
	for _, name := range names {
		a, r := abs+"/"+name, name
		if rel != "" {
			r = rel + "/" + name
		}
		if err := w.one(a, r); err != nil {
			return err
		}
	}
	return nil
}

func (w *walker) one(abs, rel string) error {
	var st unix.Stat_t
	if err := unix.Lstat(abs, &st); err != nil {
		return fmt.Errorf("stat %q: %w", rel, err)
	}
	e := &Entry{Mount: w.mount, Path: rel, Mode: st.Mode & 07777, UID: int(st.Uid), GID: int(st.Gid)}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		if xattrIs(abs, w.x.redirect, "") {
			return fmt.Errorf("upper dir %q is redirected (overlay redirect_dir=on is not supported)", rel)
		}
		e.Kind = EntryDir
		e.Opaque = xattrIs(abs, w.x.opaque, "y")
		if err := w.emit(e, nil); err != nil {
			return err
		}
		return w.dir(abs, rel)
	case unix.S_IFCHR:
		if st.Rdev == 0 {
			e.Kind = EntryWhiteout
		} else {
			e.Kind = EntryOther
		}
	case unix.S_IFLNK:
		e.Kind = EntrySymlink
		l, err := os.Readlink(abs)
		if err != nil {
			return fmt.Errorf("readlink %q: %w", rel, err)
		}
		e.Link = l
	case unix.S_IFREG:
		if st.Size == 0 && xattrIs(abs, w.x.whiteout, "") {
			e.Kind = EntryWhiteout
			break
		}
		if xattrIs(abs, w.x.metacopy, "") || xattrIs(abs, w.x.redirect, "") {
			return fmt.Errorf("upper file %q is metadata only (overlay metacopy=on is not supported)", rel)
		}
		e.Kind = EntryFile
		e.Size = st.Size
		f, err := os.OpenFile(abs, os.O_RDONLY|unix.O_NOFOLLOW, 0)
		if err != nil {
			return fmt.Errorf("opening %q: %w", rel, err)
		}
		defer f.Close()
		return w.emit(e, f)
	default:
		e.Kind = EntryOther
	}
	return w.emit(e, nil)
}

// xattrIs reports whether xattr name is set on p (with value want, unless want is
// empty, which accepts any value).
func xattrIs(p, name, want string) bool {
	var buf [8]byte
	sz, err := unix.Lgetxattr(p, name, buf[:])
	if err != nil {
		return errors.Is(err, unix.ERANGE) && want == ""
	}
	return want == "" || string(buf[:sz]) == want
}
