//go:build linux || darwin

package fswalk

import (
	"os"
	"slices"

	"golang.org/x/sys/unix"
)

// ReadDirNames returns the names in dir fd, sorted; fd stays open. The
// host's differ lists host dirs with it too.
func ReadDirNames(fd int) ([]string, error) {
	// A dup shares the offset, which only this listing uses; fd itself serves
	// the *at calls.
	nfd, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(nfd), "")
	defer f.Close()
	names, err := f.Readdirnames(-1)
	slices.Sort(names)
	return names, err
}

// ReadNamesAt lists directory name in dir fd, sorted, never following a
// symlink at name ("" or "." lists dfd itself).
func ReadNamesAt(dfd int, name string) ([]string, error) {
	if name == "" {
		name = "."
	}
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	return ReadDirNames(fd)
}

// Readlinkat reads symlink name in dir fd, whatever the target's length.
func Readlinkat(fd int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(fd, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}
