package fsdelta

import "golang.org/x/sys/unix"

// oSearch opens a dir only to look names up in it: O_PATH, which needs no
// read permission on it.
const oSearch = unix.O_PATH

// newHostFS is openat2's: the kernel refuses a symlink, a magic link, ".."
// and a mount point (bind mounts of the same filesystem included).
func newHostFS() hostFS { return kernelHostFS{} }

type kernelHostFS struct{}

const resolveBeneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_XDEV | unix.RESOLVE_NO_MAGICLINKS

func (kernelHostFS) openRoot(p string) (int, error) {
	return unix.Openat2(unix.AT_FDCWD, p, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
}

func (kernelHostFS) openAt(parent int, name string, flags int) (int, error) {
	return unix.Openat2(parent, name, &unix.OpenHow{Flags: uint64(flags | unix.O_CLOEXEC), Resolve: resolveBeneath})
}

func (h kernelHostFS) statAt(parent int, name string) (unix.Stat_t, string, error) {
	var st unix.Stat_t
	fd, err := h.openAt(parent, name, unix.O_PATH|unix.O_NOFOLLOW)
	if err != nil {
		return st, "", err
	}
	defer unix.Close(fd)
	if err := unix.Fstat(fd, &st); err != nil {
		return st, "", err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFLNK {
		return st, "", nil
	}
	buf := make([]byte, unix.PathMax)
	n, err := unix.Readlinkat(fd, "", buf)
	if err != nil {
		return st, "", err
	}
	return st, string(buf[:n]), nil
}
