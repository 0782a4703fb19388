//go:build linux || darwin

package commit

import (
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// dirs opens host directories by absolute path, never following a symlink
// anywhere on the way, and keeps them open. A path is never handed to the
// kernel whole: it is resolved from the nearest directory already open, in
// pieces shorter than PATH_MAX, so a directory 5,000 levels deep (a path of
// 10,000 bytes and more, which every path-taking system call refuses with
// ENAMETOOLONG) is reached like any other.
type dirs struct {
	fds map[string]int
	// worked holds the cached paths whose filesystem is tracked in devs.
	worked map[string]bool
	// devs holds one descriptor (a dup) per filesystem seen, which syncfs
	// needs even after the cache was emptied.
	devs map[uint64]int
	// beneath opens a relative path of dirs beneath a dir fd, following no
	// symlink: openat2 on Linux, walkBeneath on darwin.
	beneath func(dfd int, rel string) (int, error)
}

// maxCachedDirs bounds the descriptors the cache holds; past it, it starts
// over (every lookup still works, from "/"). Why: a commit's directories are
// usually few, but a deep chain has one per level, and the open-file limit
// (20,000 here) must also leave room for removeAllAt's one per level.
const maxCachedDirs = 1024

// maxPiece is the longest relative path one openat2 resolves (PATH_MAX is
// 4096 with its NUL), and maxPieceLevels the most levels; the end of each
// piece stays open, so that the next lookup in a deep tree (a removal goes
// deepest first: each one in the parent of the last) starts close by.
const (
	maxPiece       = 4000
	maxPieceLevels = 64
)

// ancestorProbes is how many ancestors a lookup tries in the cache before it
// resolves from "/" (each probe hashes the ancestor's path, long in a deep
// tree); one more than maxPieceLevels, so that a lookup beneath a walked
// piece finds its end.
const ancestorProbes = maxPieceLevels + 1

func newDirs() *dirs {
	return &dirs{fds: map[string]int{}, worked: map[string]bool{}, devs: map[uint64]int{}, beneath: openBeneath}
}

// newDirsFor is newDirs as opt says (walkDirs).
func newDirsFor(opt Options) *dirs {
	c := newDirs()
	if opt.walkDirs {
		c.beneath = walkBeneath
	}
	return c
}

// close releases every descriptor.
func (c *dirs) close() {
	c.reset()
	for _, fd := range c.devs {
		unix.Close(fd)
	}
	clear(c.devs)
}

// forget drops the cached descriptors of p and of every directory beneath it:
// p was moved or removed, and a later lookup must see what stands there then.
func (c *dirs) forget(p string) {
	for d, fd := range c.fds {
		if d == p || (len(d) > len(p) && strings.HasPrefix(d, p) && (d[len(p)] == '/' || p == "/")) {
			unix.Close(fd)
			delete(c.fds, d)
			delete(c.worked, d)
		}
	}
}

// open returns a search (oSearch) descriptor of the absolute, clean path dir, owned by
// the cache. Errors are those of openat2 with RESOLVE_NO_SYMLINKS: ELOOP for
// a symlink on the way, ENOTDIR for a non-directory, ENOENT.
func (c *dirs) open(dir string) (int, error) {
	if fd, ok := c.fds[dir]; ok {
		if !c.worked[dir] {
			c.track(dir, fd) // opened before only to pass through
		}
		return fd, nil
	}
	if !strings.HasPrefix(dir, "/") {
		return -1, fmt.Errorf("commit: %q is not absolute", dir)
	}
	// The nearest open ancestor, else "/".
	base, rest := -1, dir
	i := len(dir)
	for range ancestorProbes {
		i = strings.LastIndexByte(dir[:i], '/')
		if i <= 0 {
			break
		}
		if fd, ok := c.fds[dir[:i]]; ok {
			base, rest = fd, dir[i+1:]
			break
		}
	}
	if base < 0 {
		root, err := c.root()
		if err != nil {
			return -1, err
		}
		base, rest = root, strings.TrimPrefix(dir, "/")
		if rest == "" {
			c.track("/", root)
			return root, nil
		}
	}
	if len(c.fds) >= maxCachedDirs {
		c.reset()
		return c.open(dir)
	}
	// Resolve rest in pieces; only the directory asked for is kept (and the
	// pieces' ends, so that a deep lookup next door starts from there).
	prefix := dir[:len(dir)-len(rest)]
	for rest != "" {
		piece := rest
		if len(piece) > maxPiece {
			cut := strings.LastIndexByte(piece[:maxPiece], '/')
			if cut <= 0 {
				return -1, unix.ENAMETOOLONG
			}
			piece = piece[:cut]
		}
		if levels := 0; strings.Count(piece, "/") >= maxPieceLevels {
			cut := strings.IndexFunc(piece, func(r rune) bool {
				if r == '/' {
					levels++
				}
				return levels == maxPieceLevels
			})
			piece = piece[:cut]
		}
		fd, err := c.beneath(base, piece)
		if err != nil {
			return -1, err
		}
		prefix += piece
		if open, ok := c.fds[prefix]; ok {
			// Walked again from further up (beyond the probes): keep one.
			unix.Close(fd)
			fd = open
		} else {
			c.fds[prefix] = fd
		}
		base = fd
		rest = strings.TrimPrefix(rest[len(piece):], "/")
		prefix += "/"
	}
	c.track(dir, base)
	return base, nil
}

func (c *dirs) root() (int, error) {
	if fd, ok := c.fds["/"]; ok {
		return fd, nil
	}
	fd, err := unix.Open("/", oSearch|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	c.fds["/"] = fd
	return fd, nil
}

// reset empties the cache, keeping the per-filesystem descriptors.
func (c *dirs) reset() {
	for _, fd := range c.fds {
		unix.Close(fd)
	}
	clear(c.fds)
	clear(c.worked)
}

// track remembers the filesystem of a directory the commit works in (not of
// those it only passes through: syncing those would wait for others' writes).
func (c *dirs) track(p string, fd int) {
	c.worked[p] = true
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return
	}
	if _, ok := c.devs[uint64(st.Dev)]; !ok {
		if d, err := unix.Dup(fd); err == nil {
			c.devs[uint64(st.Dev)] = d
		}
	}
}

// sync makes every filesystem the cache has seen durable.
func (c *dirs) sync() error {
	fds := make([]int, 0, len(c.devs))
	for _, fd := range c.devs {
		fds = append(fds, fd)
	}
	return syncFS(fds)
}

// walkBeneath opens the directory rel (relative, no "..") beneath dfd without
// following any symlink, one name at a time with O_NOFOLLOW: openat2's
// RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS from calls every Unix has (darwin's;
// on Linux the tests run it beside openat2). Errors are openat2's: ELOOP for
// a symlink on the way, ENOTDIR for a non-directory, EXDEV for "..".
func walkBeneath(dfd int, rel string) (int, error) {
	fd := dfd
	for name := range strings.SplitSeq(rel, "/") {
		if name == "" || name == "." || name == ".." {
			if fd != dfd {
				unix.Close(fd)
			}
			return -1, unix.EXDEV
		}
		nfd, err := unix.Openat(fd, name, oSearch|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if fd != dfd {
			unix.Close(fd)
		}
		if err != nil {
			return -1, err
		}
		fd = nfd
	}
	return fd, nil
}
