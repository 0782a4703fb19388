package harness

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/dryexec/dryexec/cgroup"
)

// Baseline is the host's state before a daemon starts, for Leaks to compare.
type Baseline struct {
	mounts  map[string]int // mountinfo key → count
	netDevs []string
}

// TakeBaseline reads the host's mounts and network devices now.
func TakeBaseline() Baseline {
	b := Baseline{mounts: map[string]int{}, netDevs: netDevs()}
	for _, m := range mounts() {
		b.mounts[m]++
	}
	return b
}

// Leaks is what a daemon (and the CLI processes of a test) left on the host.
// Every field empty means nothing leaked.
type Leaks struct {
	// Mounts are mounts of the host's mount namespace that were not there at
	// the baseline ("mountpoint fstype source"); tmpfs and nsfs (a network
	// namespace kept by a bind mount) are among them.
	Mounts []string
	// Cgroups are dryexec group dirs (v1 and v2) created by one of the owner
	// pids.
	Cgroups []string
	// Procs are live processes that carry the env's mark (daemons excluded).
	Procs []string
	// TempEntries are what is left in the env's private TMPDIR.
	TempEntries []string
	// NetDevs are network devices of the host's namespace that were not there.
	NetDevs []string
}

// Empty reports whether nothing leaked.
func (l Leaks) Empty() bool {
	return len(l.Mounts)+len(l.Cgroups)+len(l.Procs)+len(l.TempEntries)+len(l.NetDevs) == 0
}

func (l Leaks) String() string {
	var b strings.Builder
	for _, f := range []struct {
		name string
		v    []string
	}{{"mounts", l.Mounts}, {"cgroups", l.Cgroups}, {"processes", l.Procs}, {"temp entries", l.TempEntries}, {"net devices", l.NetDevs}} {
		if len(f.v) > 0 {
			fmt.Fprintf(&b, "%s (%d):\n  %s\n", f.name, len(f.v), strings.Join(f.v, "\n  "))
		}
	}
	if b.Len() == 0 {
		return "nothing leaked"
	}
	return b.String()
}

// Leaks compares the host with b. root is the test's own directory: mounts
// under the system temp dir but outside root belong to other tests running at
// the same time and are not counted. owners are the pids whose cgroups count
// (daemons and CLI runs of the test). live are daemons still running: their
// own sandboxes (the warm pool: processes beneath them, their cgroups) are
// theirs, not leaks; count those with Descendants and OwnedCgroups.
func (e Env) Leaks(b Baseline, root string, owners []int, live ...int) Leaks {
	var l Leaks
	seen := map[string]int{}
	tmp := filepath.Clean(os.TempDir()) + "/"
	for _, m := range mounts() {
		seen[m]++
		if seen[m] <= b.mounts[m] {
			continue
		}
		mp, _, _ := strings.Cut(m, " ")
		if strings.HasPrefix(mp, tmp) && mp != root && !strings.HasPrefix(mp, root+"/") {
			continue // another test's
		}
		l.Mounts = append(l.Mounts, m)
	}
	skip := slices.Clone(live)
	for _, pid := range owners {
		if !slices.Contains(live, pid) {
			l.Cgroups = append(l.Cgroups, OwnedCgroups(pid)...)
		}
	}
	for _, pid := range live {
		skip = append(skip, Descendants(pid)...)
	}
	l.Procs = Marked(e.Mark, skip...)
	if ents, err := os.ReadDir(e.TmpDir); err == nil {
		for _, en := range ents {
			l.TempEntries = append(l.TempEntries, filepath.Join(e.TmpDir, en.Name()))
		}
	}
	for _, d := range netDevs() {
		if !slices.Contains(b.netDevs, d) {
			l.NetDevs = append(l.NetDevs, d)
		}
	}
	return l
}

// OwnedCgroups lists the dryexec group dirs (every hierarchy) that process
// pid created: their names end in ".PID-STARTTIME" (cgroup.Sweep's owner tag).
func OwnedCgroups(pid int) []string {
	var out []string
	for _, g := range cgroup.Leftovers() {
		if strings.Contains(filepath.Base(g), "."+strconv.Itoa(pid)+"-") {
			out = append(out, g)
		}
	}
	return out
}

// mounts lists the mounts of this process's mount namespace (the host's) as
// "mountpoint fstype source".
func mounts() []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 2 {
			continue
		}
		out = append(out, unescape(f[4])+" "+g[0]+" "+g[1])
	}
	return out
}

// unescape undoes mountinfo's octal escapes (\040 for a space, …).
func unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// CountMounts counts the host's mounts of fstype (all if empty).
func CountMounts(fstype string) int {
	n := 0
	for _, m := range mounts() {
		if f := strings.Fields(m); fstype == "" || (len(f) >= 2 && f[len(f)-2] == fstype) {
			n++
		}
	}
	return n
}

func netDevs() []string {
	ents, _ := os.ReadDir("/sys/class/net")
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}
