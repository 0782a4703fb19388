package linuxns

import (
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/wire"
)

// pseudoFS are filesystem types that hold no user data; the sandbox gets its own
// /proc, /dev and /sys instead of overlays of them.
var pseudoFS = map[string]bool{
	"proc": true, "sysfs": true, "devtmpfs": true, "devpts": true, "cgroup": true,
	"cgroup2": true, "mqueue": true, "debugfs": true, "tracefs": true, "securityfs": true,
	"pstore": true, "bpf": true, "configfs": true, "fusectl": true, "hugetlbfs": true,
	"autofs": true, "binfmt_misc": true, "efivarfs": true, "nsfs": true, "rpc_pipefs": true,
	"nfsd": true, "selinuxfs": true,
}

// replacedTrees are paths the sandbox gets fresh instead of overlays.
var replacedTrees = []string{"/proc", "/sys", "/dev"}

// planMounts decides which host mounts get an overlay, from mountinfo: every mount
// of a real filesystem, parents before children, the last mount at a path winning
// (it is the one a path lookup sees). /tmp is overlaid like any other path: the
// sandbox sees the host's files there, and what it writes is captured.
func planMounts(infos []*mountinfo.Info) []wire.MountSpec {
	last := map[string]*mountinfo.Info{}
	var order []string
	for _, mi := range infos {
		if pseudoFS[mi.FSType] || under(mi.Mountpoint, replacedTrees) {
			continue
		}
		if _, ok := last[mi.Mountpoint]; !ok {
			order = append(order, mi.Mountpoint)
		}
		last[mi.Mountpoint] = mi
	}
	// A mount is only visible if no mount at one of its parents came after it;
	// mountinfo lists mounts in mount order, so sorting by depth keeps parents first.
	slices.SortStableFunc(order, func(a, b string) int { return depth(a) - depth(b) })
	specs := make([]wire.MountSpec, 0, len(order))
	for _, p := range order {
		specs = append(specs, wire.MountSpec{Path: p})
	}
	if len(specs) == 0 || specs[0].Path != "/" {
		return nil
	}
	return specs
}

func depth(p string) int {
	if p == "/" {
		return 0
	}
	return strings.Count(p, "/")
}

// under reports whether p is one of roots or beneath one.
func under(p string, roots []string) bool {
	p = path.Clean(p)
	for _, r := range roots {
		if p == r || r == "/" || strings.HasPrefix(p, r+"/") {
			return true
		}
	}
	return false
}

// ownedRoots adds, for each of paths, an overlay root at the highest directory
// above it that uid owns all the way down (its parent being someone else's).
//
// Why: rootless, the host's root-owned directories appear owned by an unmapped
// uid, and overlayfs cannot copy such a directory up (it must chown the copy:
// EOVERFLOW). Any write beneath one — /tmp/build-root/me/work/x, where only the
// last two are the caller's — would fail. With an overlay rooted at the
// caller's own directory, nothing above it is ever copied up. Paths that do not
// exist, or that uid does not own, add nothing.
func ownedRoots(specs []wire.MountSpec, uid int, paths ...string) []wire.MountSpec {
	have := make(map[string]bool, len(specs))
	for _, s := range specs {
		have[s.Path] = true
	}
	for _, p := range paths {
		if !path.IsAbs(p) || under(p, replacedTrees) {
			continue
		}
		top := ""
		for d := path.Clean(p); ; d = path.Dir(d) {
			var st unix.Stat_t
			if d == "/" || unix.Lstat(d, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != uid {
				break
			}
			top = d
		}
		if top == "" || have[top] {
			continue
		}
		have[top] = true
		specs = append(specs, wire.MountSpec{Path: top})
	}
	slices.SortStableFunc(specs, func(a, b wire.MountSpec) int { return depth(a.Path) - depth(b.Path) })
	return specs
}

// mountTable remembers Mounts() until the host's mount table changes, so
// that a pooled trial does not re-read and re-plan mountinfo each time (on
// this project's VMs that is a tenth of a millisecond of a 2 ms budget). The
// kernel flags every change of the mount namespace to an open mountinfo file
// that is polled for POLLPRI, once per change: a quiet poll means the plan
// still holds. A nil mountTable plans afresh every time.
type mountTable struct {
	mu     sync.Mutex
	fd     int // /proc/self/mountinfo, polled; -1 before the first get and after close
	mounts []wire.MountSpec
	gen    uint64 // counts the plans made
}

// get returns the current plan, which the caller may modify, and its
// generation: a new plan has a new one (a nil mountTable gives 0).
func (m *mountTable) get() ([]wire.MountSpec, uint64, error) {
	if m == nil {
		mounts, err := Mounts()
		return mounts, 0, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fd < 0 {
		// Opened before reading, so that a change after the read is seen.
		fd, err := unix.Open("/proc/self/mountinfo", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			// Changes cannot be seen: every plan is a new generation.
			m.gen++
			mounts, err := Mounts()
			return mounts, m.gen, err
		}
		m.fd, m.mounts = fd, nil
	}
	pfd := []unix.PollFd{{Fd: int32(m.fd), Events: unix.POLLPRI}}
	if n, err := unix.Poll(pfd, 0); err != nil || n != 0 {
		m.mounts = nil // changed (or cannot tell): plan again
	}
	if m.mounts == nil {
		mounts, err := Mounts()
		if err != nil {
			return nil, 0, err
		}
		m.mounts = mounts
		m.gen++
	}
	return slices.Clone(m.mounts), m.gen, nil
}

func (m *mountTable) close() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fd >= 0 {
		unix.Close(m.fd)
		m.fd, m.mounts = -1, nil
	}
}
