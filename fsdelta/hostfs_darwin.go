package fsdelta

import "golang.org/x/sys/unix"

// oSearch opens a dir to look names up in it. darwin has no O_PATH; its
// O_SEARCH is recent and untried here, so a plain read-only open: a host dir
// the caller may search but not read (mode 0711) fails the diff where
// Linux's O_PATH would pass.
const oSearch = unix.O_RDONLY

// newHostFS is the portable walk: darwin has no openat2.
func newHostFS() hostFS { return walkHostFS{} }
