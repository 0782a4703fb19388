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
