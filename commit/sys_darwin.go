package commit

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// oSearch opens a directory to work in it. darwin has no O_PATH (and its
// O_SEARCH is untried here): a read-only open, so every directory on the
// way must be readable, where Linux needs search permission only.
const oSearch = unix.O_RDONLY

// omitTime leaves a time as it is (utimensat; darwin's UTIME_OMIT, which
// x/sys does not name).
var omitTime = unix.Timespec{Nsec: -2}

// openBeneath is walkBeneath: darwin has no openat2.
func openBeneath(dfd int, rel string) (int, error) { return walkBeneath(dfd, rel) }

// renameNoReplace renames, failing with EEXIST when to exists
// (renameatx_np's RENAME_EXCL: renameat2's RENAME_NOREPLACE).
func renameNoReplace(fromfd int, from string, tofd int, to string) error {
	return unix.RenameatxNp(fromfd, from, tofd, to, unix.RENAME_EXCL)
}

// renameExchange swaps two names atomically (renameatx_np's RENAME_SWAP:
// renameat2's RENAME_EXCHANGE).
func renameExchange(fromfd int, from string, tofd int, to string) error {
	return unix.RenameatxNp(fromfd, from, tofd, to, unix.RENAME_SWAP)
}

// errNoFifo: darwin has mkfifoat(2), but x/sys does not offer it, and a
// fifo made by whole path could be redirected by a symlink swapped in on
// the way. A commit that creates a fifo fails, and rolls back.
var errNoFifo = errors.New("creating a fifo is not supported on darwin in this build")

func mkfifoAt(int, string, uint32) error { return errNoFifo }

// setFdMtime sets the mtime of fd, which is name in dfd: x/sys has no
// futimens for darwin, so through the name (never following a symlink),
// checked to be fd's file after.
func setFdMtime(dfd int, name string, fd int, mtime int64) error {
	ts := [2]unix.Timespec{omitTime, unix.NsecToTimespec(mtime)}
	if err := unix.UtimesNanoAt(dfd, name, ts[:], unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	var a, b unix.Stat_t
	if err := unix.Fstat(fd, &a); err != nil {
		return err
	}
	if err := unix.Fstatat(dfd, name, &b, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	// The inode only: a filesystem with coarser times (HFS+: seconds)
	// stores a rounded mtime.
	if a.Dev != b.Dev || a.Ino != b.Ino {
		return fmt.Errorf("%s was replaced while its mtime was set", name)
	}
	return nil
}

// syncfs makes the filesystem of fd durable: darwin has no syncfs, so
// sync(2) (which schedules every dirty buffer) and then F_FULLFSYNC on fd,
// which flushes the drive's cache as well. Not verified on a Mac: whether
// sync(2) has written everything by the time F_FULLFSYNC runs.
func syncfs(fd int) error {
	unix.Sync()
	_, err := unix.FcntlInt(uintptr(fd), unix.F_FULLFSYNC, 0)
	return err
}
