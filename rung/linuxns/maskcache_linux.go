package linuxns

import (
	"errors"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// maskCache remembers ResolveMasks' answer for a Pool until something that
// could change it happens, so that a pooled trial does not lstat every
// default mask of every home again: on this project's VMs that was ≈ 0.14 ms
// of a warm trial's ≈ 2.5, spent before the command may start.
//
// What could change the answer, and how each is seen:
//
//   - a path appearing, vanishing or being replaced anywhere along a mask's
//     path: every existing ancestor directory of every mask is watched with
//     inotify for entries created, deleted or moved in or out, and an event
//     counts only if it names the next component of a mask's path (the
//     store's own trial directories sit beside the CA's mask and must not
//     empty the cache each time); a watched directory deleted or moved
//     itself, or a queue overflow, counts always;
//   - the homes: $HOME and /etc/passwd (its directory is watched for that
//     name too);
//   - mounts (no inotify event): the key holds the Pool's mount table
//     generation, which changes with the host's mount table;
//   - a symlink on a mask's path (its target's own ancestors are not
//     watched): such an answer is never cached.
//
// A nil maskCache, or one whose inotify instance could not be made, resolves
// afresh every time.
type maskCache struct {
	mu    sync.Mutex
	fd    int // inotify, -1 until the first answer is cached and after close
	names map[int32]map[string]bool
	key   maskKey
	cover *Cover // nil: nothing cached
	// resolved counts fresh resolutions (for tests).
	resolved int
}

// maskKey is what an answer was resolved for, besides the filesystem.
type maskKey struct {
	extra      string // the spec's masks, NUL-separated
	noDefaults bool
	own        string // the spec's own paths, NUL-separated
	// The environment ownPathDefaults reads, besides the homes.
	home, dryexecHome, xdgState, xdgRuntime string
	mountGen                                uint64
}

func newMaskCache() *maskCache { return &maskCache{fd: -1} }

// resolve is ResolveCover(extra, noDefaults, own), cached; mountGen is the
// mount table generation the caller's plan came from.
func (c *maskCache) resolve(extra []string, noDefaults bool, own []string, mountGen uint64) (Cover, error) {
	if c == nil {
		return ResolveCover(extra, noDefaults, own)
	}
	key := maskKey{extra: strings.Join(extra, "\x00"), noDefaults: noDefaults, own: strings.Join(own, "\x00"),
		home: os.Getenv("HOME"), dryexecHome: os.Getenv("DRYEXEC_HOME"), xdgState: os.Getenv("XDG_STATE_HOME"),
		xdgRuntime: os.Getenv("XDG_RUNTIME_DIR"), mountGen: mountGen}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cover != nil && c.key == key && !c.changed() {
		return Cover{Masks: slices.Clone(c.cover.Masks), Hidden: slices.Clone(c.cover.Hidden)}, nil
	}
	c.resolved++
	c.reset()
	masks, hidden, err := coverPaths(Homes(), extra, noDefaults, own)
	if err != nil {
		return Cover{}, err
	}
	// Watched before they are resolved: a change in between is seen next
	// time.
	cacheable := c.watch(append(slices.Clone(masks), hidden...))
	cover := resolveCover(masks, hidden)
	if cacheable {
		c.key = key
		c.cover = &Cover{Masks: slices.Clone(cover.Masks), Hidden: slices.Clone(cover.Hidden)}
	} else {
		c.reset()
	}
	return cover, nil
}

// reset forgets the cached answer and every watch.
func (c *maskCache) reset() {
	if c.fd >= 0 {
		unix.Close(c.fd)
	}
	c.fd, c.names, c.cover = -1, nil, nil
}

func (c *maskCache) close() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.reset()
}

// inotify events that can change a resolution.
const (
	maskDirEvents  = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF
	maskSelfEvents = unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_IGNORED | unix.IN_Q_OVERFLOW | unix.IN_UNMOUNT
)

// watch makes a fresh inotify instance watching every existing ancestor of
// paths (and /etc for passwd), and reports whether the answer may be cached:
// not if a path or an ancestor is a symlink, nor if a watch could not be
// added.
func (c *maskCache) watch(paths []string) bool {
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		return false
	}
	c.fd, c.names = fd, map[int32]map[string]bool{}
	add := func(dir, name string) bool {
		wd, err := unix.InotifyAddWatch(fd, dir, maskDirEvents|unix.IN_ONLYDIR|unix.IN_DONT_FOLLOW)
		if err != nil {
			return false
		}
		if c.names[int32(wd)] == nil {
			c.names[int32(wd)] = map[string]bool{}
		}
		c.names[int32(wd)][name] = true
		return true
	}
	if !add("/etc", "passwd") {
		return false
	}
	for _, p := range paths {
		dir := "/"
		for _, name := range strings.Split(strings.TrimPrefix(p, "/"), "/") {
			if !add(dir, name) {
				return false
			}
			next := path.Join(dir, name)
			var st unix.Stat_t
			if err := unix.Lstat(next, &st); err != nil {
				if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
					break // its creation is an event in dir
				}
				return false
			}
			if st.Mode&unix.S_IFMT == unix.S_IFLNK {
				return false
			}
			if st.Mode&unix.S_IFMT != unix.S_IFDIR {
				break
			}
			dir = next
		}
	}
	return true
}

// changed reads the pending events and says whether one of them counts.
func (c *maskCache) changed() bool {
	if c.fd < 0 {
		return true
	}
	var buf [4096]byte
	changed := false
	for {
		n, err := unix.Read(c.fd, buf[:])
		if err == unix.EINTR {
			continue
		}
		if err == unix.EAGAIN {
			return changed
		}
		if err != nil || n <= 0 {
			return true
		}
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			name := buf[off+unix.SizeofInotifyEvent : off+unix.SizeofInotifyEvent+int(ev.Len)]
			name = name[:clen(name)]
			off += unix.SizeofInotifyEvent + int(ev.Len)
			if ev.Mask&maskSelfEvents != 0 || c.names[ev.Wd][string(name)] {
				changed = true
			}
		}
	}
}

// clen is the length of the NUL-padded name in b.
func clen(b []byte) int {
	if i := slices.Index(b, 0); i >= 0 {
		return i
	}
	return len(b)
}
