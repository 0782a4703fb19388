package fsdelta

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"golang.org/x/sys/unix"
)

// Overlay marks its state with xattrs in the trusted.* namespace, or user.* when
// mounted with userxattr (always, inside a user namespace).
var (
	opaqueXattrs   = []string{"user.overlay.opaque", "trusted.overlay.opaque"}
	whiteoutXattrs = []string{"user.overlay.whiteout", "trusted.overlay.whiteout"}
	// An upper entry with one of these does not hold what the merged view shows:
	// a redirected dir (redirect_dir=on) takes its children from another lower
	// path, and a metacopy file (metacopy=on) has its data in the lower. Neither
	// can be reported as an Entry, so the walk refuses them rather than report a
	// renamed dir as empty or a chmod-ed file as a sparse file of zeros.
	redirectXattrs = []string{"user.overlay.redirect", "trusted.overlay.redirect"}
	metacopyXattrs = []string{"user.overlay.metacopy", "trusted.overlay.metacopy"}
)

// WalkUpper walks the overlay upper dir at root (pre-order, names sorted) and calls
// emit for each entry. For files, content is open for reading and positioned at 0;
// emit must not keep it past its return. The root itself is not reported.
func WalkUpper(root string, mount int, emit func(e *Entry, content *os.File) error) error {
	return walkDir(root, "", mount, emit)
}

func walkDir(abs, rel string, mount int, emit func(*Entry, *os.File) error) error {
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
		if err := walkOne(a, r, mount, emit); err != nil {
			return err
		}
	}
	return nil
}

func walkOne(abs, rel string, mount int, emit func(*Entry, *os.File) error) error {
	var st unix.Stat_t
	if err := unix.Lstat(abs, &st); err != nil {
		return fmt.Errorf("stat %q: %w", rel, err)
	}
	e := &Entry{Mount: mount, Path: rel, Mode: st.Mode & 07777}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFDIR:
		if xattrIs(abs, redirectXattrs, "") {
			return fmt.Errorf("upper dir %q is redirected (overlay redirect_dir=on is not supported)", rel)
		}
		e.Kind = EntryDir
		e.Opaque = xattrIs(abs, opaqueXattrs, "y")
		if err := emit(e, nil); err != nil {
			return err
		}
		return walkDir(abs, rel, mount, emit)
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
		if st.Size == 0 && xattrIs(abs, whiteoutXattrs, "") {
			e.Kind = EntryWhiteout
			break
		}
		if xattrIs(abs, metacopyXattrs, "") || xattrIs(abs, redirectXattrs, "") {
			return fmt.Errorf("upper file %q is metadata only (overlay metacopy=on is not supported)", rel)
		}
		e.Kind = EntryFile
		e.Size = st.Size
		f, err := os.OpenFile(abs, os.O_RDONLY|unix.O_NOFOLLOW, 0)
		if err != nil {
			return fmt.Errorf("opening %q: %w", rel, err)
		}
		defer f.Close()
		return emit(e, f)
	default:
		e.Kind = EntryOther
	}
	return emit(e, nil)
}

// xattrIs reports whether one of names is set on p (with value want, unless want
// is empty, which accepts any value).
func xattrIs(p string, names []string, want string) bool {
	var buf [8]byte
	for _, n := range names {
		sz, err := unix.Lgetxattr(p, n, buf[:])
		if err != nil {
			if errors.Is(err, unix.ERANGE) && want == "" {
				return true
			}
			continue
		}
		if want == "" || string(buf[:sz]) == want {
			return true
		}
	}
	return false
}
