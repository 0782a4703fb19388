package linuxns

import (
	"path"
	"slices"
	"strings"

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
