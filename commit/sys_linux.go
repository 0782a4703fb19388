package commit

import (
	"unsafe"

	"golang.org/x/sys/unix"
)

// oSearch opens a directory only to work in it: O_PATH needs no read
// permission on it.
const oSearch = unix.O_PATH

// omitTime leaves a time as it is (utimensat).
var omitTime = unix.Timespec{Nsec: unix.UTIME_OMIT}

// openBeneath opens the directory rel (relative, no "..") beneath dfd without
// following any symlink.
func openBeneath(dfd int, rel string) (int, error) {
	for {
		fd, err := unix.Openat2(dfd, rel, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_BENEATH,
		})
		if err == unix.EAGAIN || err == unix.EINTR {
			continue // RESOLVE_BENEATH retries when a rename raced the walk
		}
		return fd, err
	}
}

// renameNoReplace renames, failing with EEXIST when to exists.
func renameNoReplace(fromfd int, from string, tofd int, to string) error {
	return unix.Renameat2(fromfd, from, tofd, to, unix.RENAME_NOREPLACE)
}

// renameExchange swaps two names atomically; both must exist.
func renameExchange(fromfd int, from string, tofd int, to string) error {
	return unix.Renameat2(fromfd, from, tofd, to, unix.RENAME_EXCHANGE)
}

// mkfifoAt makes a fifo name in dfd.
func mkfifoAt(dfd int, name string, mode uint32) error {
	return unix.Mknodat(dfd, name, unix.S_IFIFO|mode, 0)
}

// setFdMtime sets fd's mtime, leaving the atime alone (futimens: utimensat
// with a NULL path, which x/sys does not offer); dfd and name are unused.
func setFdMtime(_ int, _ string, fd int, mtime int64) error {
	ts := [2]unix.Timespec{omitTime, unix.NsecToTimespec(mtime)}
	_, _, errno := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// syncfs makes the filesystem of fd durable.
func syncfs(fd int) error { return unix.Syncfs(fd) }
