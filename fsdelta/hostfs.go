//go:build linux || darwin

package fsdelta

import (
	"path"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/fswalk"
)

// hostFS is how the Differ reaches the host: one name at a time, relative
// to an fd of its parent dir, never through a symlink and never into
// another filesystem. Errors are errnos; ENOENT, ELOOP, EXDEV and ENOTDIR
// mean "nothing the Differ may look at" (gone).
type hostFS interface {
	// openRoot opens the absolute, clean dir p for search, following no
	// symlink on the way to it.
	openRoot(p string) (int, error)
	// openAt opens name (one name: no "/", never "." or "..") in parent.
	openAt(parent int, name string, flags int) (int, error)
	// statAt stats name in parent without following it, and reads the
	// target when it is a symlink.
	statAt(parent int, name string) (unix.Stat_t, string, error)
}

// walkHostFS is hostFS from calls every Unix has: openat with O_NOFOLLOW,
// one name at a time, and the device compared with the parent's. It is
// darwin's (which has no openat2); on Linux the tests run the Differ's
// hostile cases through it too. What it cannot see that openat2's
// RESOLVE_NO_XDEV does: a bind mount of the same filesystem (same device),
// which macOS does not have.
type walkHostFS struct{}

// checkName refuses what would leave the parent dir: RESOLVE_BENEATH's
// part, which a single name gets from O_NOFOLLOW alone once "..", "." and
// "/" are ruled out.
func checkName(name string) error {
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") {
		return unix.EXDEV
	}
	return nil
}

// sameDev returns EXDEV when st is not on parent's filesystem.
func sameDev(parent int, st *unix.Stat_t) error {
	var pst unix.Stat_t
	if err := unix.Fstat(parent, &pst); err != nil {
		return err
	}
	if pst.Dev != st.Dev {
		return unix.EXDEV
	}
	return nil
}

func (walkHostFS) openRoot(p string) (int, error) {
	if !path.IsAbs(p) || path.Clean(p) != p {
		return -1, unix.EINVAL
	}
	fd, err := unix.Open("/", oSearch|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	if p == "/" {
		return fd, nil
	}
	for _, name := range strings.Split(p[1:], "/") {
		nfd, err := unix.Openat(fd, name, oSearch|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		if err != nil {
			return -1, err
		}
		fd = nfd
	}
	return fd, nil
}

func (walkHostFS) openAt(parent int, name string, flags int) (int, error) {
	if err := checkName(name); err != nil {
		return -1, err
	}
	// O_NONBLOCK: a fifo put where a file was must not block the open.
	fd, err := unix.Openat(parent, name, flags|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return -1, err
	}
	if err := sameDev(parent, &st); err != nil {
		unix.Close(fd)
		return -1, err
	}
	switch uint32(st.Mode) & unix.S_IFMT {
	case unix.S_IFREG, unix.S_IFDIR:
	default:
		// The Differ opens dirs and files only (lookups are statAt's);
		// anything else here was swapped in since it looked.
		unix.Close(fd)
		return -1, unix.ENXIO
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func (walkHostFS) statAt(parent int, name string) (unix.Stat_t, string, error) {
	var st unix.Stat_t
	if err := checkName(name); err != nil {
		return st, "", err
	}
	if err := unix.Fstatat(parent, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return st, "", err
	}
	if err := sameDev(parent, &st); err != nil {
		return st, "", err
	}
	if uint32(st.Mode)&unix.S_IFMT != unix.S_IFLNK {
		return st, "", nil
	}
	link, err := fswalk.Readlinkat(parent, name)
	return st, link, err
}
