package cgroup

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
)

// controllers are the ones dryexec sets limits with.
var controllers = []string{"memory", "pids", "cpu"}

// hierarchy is one mounted cgroup tree dryexec uses: the v2 tree, or one v1
// tree per controller mount (a v1 mount may carry several, "cpu,cpuacct").
type hierarchy struct {
	v2     bool
	mount  string   // where it is mounted
	ctrls  []string // the controllers of ours it carries (v1); v2: filled per group
	parent string   // absolute dir of the dryexec parent group in it
	// placeOnly: a hybrid host's v2 tree, used only to place the sandbox
	// (it carries no controllers of ours).
	placeOnly bool
}

// Options configures a Manager.
type Options struct {
	// Parent is where the dryexec parent group is: an absolute path is from
	// each hierarchy's root; a relative one (default "dryexec") is beneath
	// this process's own group on v1, so that limits of the group we run in
	// still bound the sandboxes, and beneath its parent on v2 (a sibling of
	// ours), because a v2 group with processes in it cannot have controllers
	// enabled for children.
	Parent string
	// V2Mount forces the v2 tree mounted there (tests on hybrid hosts, whose
	// cgroup2 tree usually carries no controllers).
	V2Mount string
}

// Manager creates groups in the hierarchies of this host. It holds no open
// resources; it is safe for concurrent use.
type Manager struct {
	hier     []hierarchy
	memTotal int64
	owner    string // ".<pid>-<starttime>" of this process, suffix of its group names
}

// Version says "cgroup-v1" or "cgroup-v2" (a hybrid host is v1: its
// controllers are).
func (m *Manager) Version() string {
	if len(m.hier) > 0 && m.hier[0].v2 {
		return "cgroup-v2"
	}
	return "cgroup-v1"
}

// Parents lists the dryexec parent group of each hierarchy.
func (m *Manager) Parents() []string {
	var out []string
	for _, h := range m.hier {
		out = append(out, h.parent)
	}
	return out
}

// NewManager finds the hierarchies that carry the memory, pids and cpu
// controllers: the v2 tree when /sys/fs/cgroup is one (or opt.V2Mount says
// so), else the v1 trees (legacy and hybrid hosts).
func NewManager(opt Options) (*Manager, error) {
	hier, err := discover(opt.V2Mount)
	if err != nil {
		return nil, err
	}
	own, err := ownGroups()
	if err != nil {
		return nil, err
	}
	for i := range hier {
		h := &hier[i]
		key := "" // v2
		if !h.v2 {
			key = h.ctrls[0]
		}
		p := opt.Parent
		if p == "" {
			p = ParentName
		}
		if !strings.HasPrefix(p, "/") {
			g := own[key]
			if h.v2 {
				g = path.Dir(g)
			}
			p = path.Join(g, p)
		}
		if !strings.HasPrefix(p, "/") || path.Clean(p) != p || p == "/" {
			return nil, fmt.Errorf("cgroup parent %q: want a clean absolute path other than /", p)
		}
		h.parent = filepath.Join(h.mount, p)
	}
	m := &Manager{hier: hier, memTotal: memTotal(), owner: "." + ownerTag(os.Getpid())}
	return m, nil
}

// discover reads mountinfo for the cgroup trees to use.
func discover(v2Mount string) ([]hierarchy, error) {
	infos, err := mountinfo.GetMounts(func(i *mountinfo.Info) (skip, stop bool) {
		return i.FSType != "cgroup" && i.FSType != "cgroup2", false
	})
	if err != nil {
		return nil, fmt.Errorf("reading mountinfo: %w", err)
	}
	if v2Mount != "" {
		for _, i := range infos {
			if i.FSType == "cgroup2" && i.Mountpoint == v2Mount {
				return []hierarchy{{v2: true, mount: v2Mount}}, nil
			}
		}
		return nil, &UnavailableError{Reason: "no cgroup2 mount at " + v2Mount}
	}
	var v1 []hierarchy
	var v2 string
	for _, i := range infos {
		if i.Root != "/" {
			continue // a bind of a subtree (containers): paths would not line up
		}
		if i.FSType == "cgroup2" {
			if v2 == "" || i.Mountpoint == "/sys/fs/cgroup" {
				v2 = i.Mountpoint
			}
			continue
		}
		var ours []string
		for _, o := range strings.Split(i.VFSOptions, ",") {
			for _, c := range controllers {
				if o == c {
					ours = append(ours, c)
				}
			}
		}
		if len(ours) > 0 {
			dup := false
			for _, h := range v1 {
				dup = dup || h.ctrls[0] == ours[0]
			}
			if !dup {
				v1 = append(v1, hierarchy{mount: i.Mountpoint, ctrls: ours})
			}
		}
	}
	if v2 == "/sys/fs/cgroup" || (len(v1) == 0 && v2 != "") {
		return []hierarchy{{v2: true, mount: v2}}, nil
	}
	if len(v1) == 0 {
		return nil, &UnavailableError{Reason: "no cgroup filesystem is mounted"}
	}
	if v2 != "" {
		// Hybrid: the v2 tree carries none of our controllers, but a sandbox
		// is placed there too, so that its cgroup namespace is rooted in its
		// own group on every hierarchy (a cgroup2 mount from a namespace of
		// its own shows its group, not the host's tree).
		v1 = append(v1, hierarchy{v2: true, mount: v2, placeOnly: true})
	}
	return v1, nil
}

// ownGroups maps each v1 controller (and "" for v2) to this process's group.
func ownGroups() (map[string]string, error) {
	return parseGroups("/proc/self/cgroup")
}

// parseGroups reads a /proc/…/cgroup file into a map from each v1
// controller (and "" for v2) to the group.
func parseGroups(file string) (map[string]string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", file, err)
	}
	own := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			own[c] = f[2]
		}
	}
	return own, nil
}

// ownerTag names a process for as long as it lives: pid and start time, so
// that a reused pid is not mistaken for the creator.
func ownerTag(pid int) string {
	return strconv.Itoa(pid) + "-" + strconv.FormatUint(startTime(pid), 10)
}

func startTime(pid int) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(string(b[i+1:]))
	// Field 22 of stat is starttime; f starts at field 3 (state).
	if len(f) < 20 {
		return 0
	}
	v, _ := strconv.ParseUint(f[19], 10, 64)
	return v
}

// orphan reports whether a group is ours (named "….<pid>-<start>") and the
// process that made it is gone. A name that does not parse is not ours to
// remove. starts holds the start times already read (one process owns a
// group in every hierarchy, and a daemon many): each /proc read is ≈ 20 µs.
func orphan(name string, starts map[int]uint64) bool {
	i := strings.LastIndexByte(name, '.')
	if i < 0 {
		return false
	}
	pidS, startS, ok := strings.Cut(name[i+1:], "-")
	pid, err1 := strconv.Atoi(pidS)
	start, err2 := strconv.ParseUint(startS, 10, 64)
	if !ok || err1 != nil || err2 != nil || pid <= 0 {
		return false
	}
	st, seen := starts[pid]
	if !seen {
		st = startTime(pid)
		starts[pid] = st
	}
	return st == 0 || st != start
}

func memTotal() int64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "MemTotal:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return kb << 10
		}
	}
	return 0
}

// Resolve fills l's zero fields with the defaults (docs/limits.md): memory half
// of the host's RAM, DefaultPids processes, weight 100, no CPU quota.
func (m *Manager) Resolve(l dryexec.Limits) dryexec.Limits { return resolve(l, m.memTotal) }

// Defaults is Resolve without a Manager (for rlimit fallbacks).
func Defaults(l dryexec.Limits) dryexec.Limits { return resolve(l, memTotal()) }

func resolve(l dryexec.Limits, memTotal int64) dryexec.Limits {
	if l.MemoryBytes == 0 && memTotal > 0 {
		l.MemoryBytes = memTotal / 2 &^ (1<<20 - 1)
	}
	if l.Pids == 0 {
		l.Pids = dryexec.DefaultPids
	}
	if l.CPUWeight <= 0 {
		l.CPUWeight = 100
	}
	return l
}

// Group is one sandbox's cgroup (a directory in each hierarchy).
type Group struct {
	m      *Manager
	name   string
	dirs   []string // the group, one per hierarchy, same order as m.hier: limits and counters
	runs   []string // dirs[i]/run: where the processes are (see New)
	limits dryexec.Limits
	fd     int        // v2: the group's directory, for clone3(CLONE_INTO_CGROUP); else -1
	stats  statFiles  // what Stats reads, opened by its first call, closed by Remove
	mu     sync.Mutex // guards the fields below (ShelterThreads runs beside the trial)
	// sheltered are the sibling groups ShelterThreads made (removed with g).
	sheltered []string
	// headroom is what pids.max has on top of limits.Pids (ShelterHeadroom
	// until ShelterThreads lowers it).
	headroom int64
}

// PidsHeadroom is how many tasks the pids limit has on top of Limits().Pids
// for the supervisor now.
func (g *Group) PidsHeadroom() int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.headroom
}

// New creates the group called name (a trial or session id) with limits l
// (zero fields: Resolve's defaults) and returns it with warnings for limits
// that this host cannot enforce (a controller missing). An error that is
// ErrUnavailable means no group could be created at all.
func (m *Manager) New(name string, l dryexec.Limits) (*Group, []string, error) {
	if name == "" || strings.ContainsAny(name, "/\n\x00") || name[0] == '.' {
		return nil, nil, fmt.Errorf("cgroup name %q", name)
	}
	if err := l.Check(); err != nil {
		return nil, nil, err
	}
	l = m.Resolve(l)
	g := &Group{m: m, name: name + m.owner, limits: l, fd: -1}
	var warnings []string
	have := map[string]bool{}
	for _, h := range m.hier {
		dir, err := makeGroup(h, g.name)
		if err != nil {
			g.Remove()
			return nil, nil, err
		}
		g.dirs = append(g.dirs, dir)
		// The processes go one level down, into run: a sandbox that made a
		// cgroup namespace and mount of its own would see run as the root,
		// and the limits, on dir, are above it, out of its reach.
		run := filepath.Join(dir, "run")
		if err := os.Mkdir(run, 0o755); err != nil {
			g.Remove()
			return nil, nil, fmt.Errorf("creating cgroup %s: %w", run, err)
		}
		g.runs = append(g.runs, run)
		ctrls := h.ctrls
		if h.v2 {
			b, _ := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
			ctrls = strings.Fields(string(b))
			fd, err := unix.Open(run, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				g.Remove()
				return nil, nil, fmt.Errorf("opening %s: %w", run, err)
			}
			g.fd = fd
		}
		for _, c := range ctrls {
			have[c] = true
			if c == "pids" && l.Pids > 0 {
				g.headroom = ShelterHeadroom
			}
			if err := setLimits(dir, h.v2, c, l); err != nil {
				g.Remove()
				return nil, nil, err
			}
		}
	}
	for _, c := range controllers {
		if !have[c] {
			warnings = append(warnings, fmt.Sprintf("%s limit not enforced: this host's cgroups (%s) have no %s controller", c, m.Version(), c))
		}
	}
	return g, warnings, nil
}

// makeGroup creates parent (and on v2 enables our controllers for its
// children) and the group dir in it. Another process's Sweep may remove an
// empty parent between the two steps, so an ENOENT retries.
func makeGroup(h hierarchy, name string) (string, error) {
	dir := filepath.Join(h.parent, name)
	var err error
	for range 3 {
		if err = mkdirChain(h); err != nil {
			return "", err
		}
		if err = os.Mkdir(dir, 0o755); err == nil || !errors.Is(err, fs.ErrNotExist) {
			break
		}
	}
	if err != nil {
		if errors.Is(err, fs.ErrPermission) || errors.Is(err, unix.EROFS) || errors.Is(err, unix.EPERM) {
			return "", &UnavailableError{Reason: fmt.Sprintf("cannot create %s: %v", dir, unwrapPath(err))}
		}
		return "", fmt.Errorf("creating cgroup %s: %w", dir, err)
	}
	return dir, nil
}

// mkdirChain creates the parent group; on v2 it turns our controllers on in
// the subtree_control of the parent's parent and of the parent, which is what
// lets the new group have them.
func mkdirChain(h hierarchy) error {
	if err := os.MkdirAll(h.parent, 0o755); err != nil {
		if errors.Is(err, fs.ErrPermission) || errors.Is(err, unix.EROFS) || errors.Is(err, unix.EPERM) {
			return &UnavailableError{Reason: fmt.Sprintf("cannot create %s: %v", h.parent, unwrapPath(err))}
		}
		return fmt.Errorf("creating cgroup parent %s: %w", h.parent, err)
	}
	if h.v2 {
		for _, d := range []string{filepath.Dir(h.parent), h.parent} {
			enableControllers(d)
		}
	}
	return nil
}

// enableControllers writes "+c" to dir's subtree_control for each of ours
// that dir has. Failure leaves that controller off, which New reports as a
// warning.
func enableControllers(dir string) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return
	}
	on, _ := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	for _, c := range strings.Fields(string(b)) {
		for _, want := range controllers {
			if c == want && !strings.Contains(" "+string(on)+" ", " "+c+" ") {
				os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+"+c), 0)
			}
		}
	}
}

func unwrapPath(err error) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

// setLimits writes controller c's limits into dir.
func setLimits(dir string, v2 bool, c string, l dryexec.Limits) error {
	w := func(file, val string) error {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(val), 0); err != nil {
			return fmt.Errorf("setting %s=%s: %w", file, val, err)
		}
		return nil
	}
	opt := func(file, val string) { os.WriteFile(filepath.Join(dir, file), []byte(val), 0) }
	switch {
	case c == "memory" && l.MemoryBytes > 0 && v2:
		if err := w("memory.max", strconv.FormatInt(l.MemoryBytes, 10)); err != nil {
			return err
		}
		opt("memory.swap.max", "0") // absent without swap accounting
	case c == "memory" && l.MemoryBytes > 0:
		if err := w("memory.limit_in_bytes", strconv.FormatInt(l.MemoryBytes, 10)); err != nil {
			return err
		}
		opt("memory.memsw.limit_in_bytes", strconv.FormatInt(l.MemoryBytes, 10)) // absent without swap accounting
	case c == "pids" && l.Pids > 0:
		// While the supervisor's threads share the limit (until
		// ShelterThreads on v1; always on v2), headroom keeps a bomb from
		// leaving it unable to start a thread.
		return w("pids.max", strconv.FormatInt(l.Pids+ShelterHeadroom, 10))
	case c == "cpu" && v2:
		if err := w("cpu.weight", strconv.Itoa(l.CPUWeight)); err != nil {
			return err
		}
		if l.CPUs > 0 {
			return w("cpu.max", fmt.Sprintf("%d 100000", int64(l.CPUs*100000)))
		}
	case c == "cpu":
		// v1 shares: 1024 is v2's 100.
		shares := max(2, min(262144, l.CPUWeight*1024/100))
		if err := w("cpu.shares", strconv.Itoa(shares)); err != nil {
			return err
		}
		if l.CPUs > 0 {
			if err := w("cpu.cfs_period_us", "100000"); err != nil {
				return err
			}
			return w("cpu.cfs_quota_us", strconv.FormatInt(int64(l.CPUs*100000), 10))
		}
	}
	return nil
}

// Limits returns the limits the group was created with, defaults filled in.
func (g *Group) Limits() dryexec.Limits { return g.limits }

// Paths lists the group's directory in each hierarchy.
func (g *Group) Paths() []string { return append([]string(nil), g.dirs...) }

// CgroupFD is the v2 group's directory fd for SysProcAttr.CgroupFD (clone3
// CLONE_INTO_CGROUP: the child starts inside the group, and its cgroup
// namespace is rooted there), or -1 on v1. Alive until Remove.
func (g *Group) CgroupFD() int { return g.fd }

// Attach moves pid into the group's v1 hierarchies (v2 places a child at
// clone time through CgroupFD). Call it before the process starts anything.
func (g *Group) Attach(pid int) error {
	for i, h := range g.m.hier {
		if h.v2 && g.fd >= 0 {
			continue
		}
		if err := os.WriteFile(filepath.Join(g.runs[i], "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("moving pid %d into %s: %w", pid, g.runs[i], err)
		}
	}
	return nil
}

// ShelterThreads moves the threads of process pid (the guest supervisor),
// all but thread keep (0: none), out of the group's v1 pids and memory
// hierarchies into a sibling group without limits, and lowers the pids
// limit to the one asked for. Call
// it once pid has started the sandbox's command inside the group, or — keep
// being the one thread that starts commands — before; keep must start
// nothing while it runs (it leaves with the whole process and is moved
// back: what it forked meanwhile would start outside the limit). A fork
// bomb then fills the limit without leaving the supervisor unable to start
// a thread (the Go runtime aborts when it cannot). And the supervisor is out of
// the reach of the group's OOM killer, which picks among the processes whose
// leading thread is in the group: a command may raise the supervisor's
// /proc/1/oom_score_adj (the file is its uid's) and then fill the memory
// limit, which killed the supervisor instead of the command. Memory the
// supervisor allocates is charged to its leading thread's group, the
// shelter; keep's children are born, and charged, in the group. Only v1
// places the threads of a process apart (keep ends up where the group's
// processes run); on v2 (no per-thread placement for domain controllers) it
// does nothing.
func (g *Group) ShelterThreads(pid, keep int) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i, h := range g.m.hier {
		pids := slices.Contains(h.ctrls, "pids")
		if h.v2 || !(pids || slices.Contains(h.ctrls, "memory")) || len(g.dirs) <= i {
			continue
		}
		shelter, err := g.makeShelter(i)
		if err != nil {
			return err
		}
		// The whole process moves in one write, then thread keep goes back
		// to where the group's processes run. One migration of the thread
		// group, under the kernel's lock that holds off new threads, where
		// moving each thread (a write to "tasks" each, twice over for the
		// threads started meanwhile) cost ≈ 0.5–0.9 ms of a cold trial
		// here; and no thread started meanwhile can stay behind.
		if err := os.WriteFile(filepath.Join(shelter, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
			return fmt.Errorf("sheltering pid %d in %s: %w", pid, shelter, err)
		}
		if keep != 0 {
			if err := os.WriteFile(filepath.Join(g.runs[i], "tasks"), []byte(strconv.Itoa(keep)), 0); err != nil {
				return fmt.Errorf("keeping thread %d of pid %d in %s: %w", keep, pid, g.runs[i], err)
			}
		}
		if pids && g.limits.Pids > 0 {
			if err := os.WriteFile(filepath.Join(g.dirs[i], "pids.max"), []byte(strconv.FormatInt(g.limits.Pids, 10)), 0); err != nil {
				return err
			}
			g.headroom = 0
		}
	}
	return nil
}

// makeShelter creates the shelter of hierarchy i (a sibling of the group
// without limits, where the supervisor's own threads stay) and records it
// for Remove; it returns its directory. Called with g.mu held.
func (g *Group) makeShelter(i int) (string, error) {
	// Named like a group of ours ("<name>-guest.<pid>-<start>"), so that
	// Sweep sees whose it is and leaves it alone while we live.
	shelter := filepath.Join(filepath.Dir(g.dirs[i]), strings.TrimSuffix(g.name, g.m.owner)+"-guest"+g.m.owner)
	if err := os.Mkdir(shelter, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return "", err
	}
	if !slices.Contains(g.sheltered, shelter) {
		g.sheltered = append(g.sheltered, shelter)
	}
	return shelter, nil
}

// sheltersFrom says whether hierarchy h is one the supervisor's threads are
// sheltered from (ShelterThreads, SpawnSheltered): a v1 tree with the pids
// or memory controller.
func sheltersFrom(h hierarchy) bool {
	return !h.v2 && (slices.Contains(h.ctrls, "pids") || slices.Contains(h.ctrls, "memory"))
}

// ErrNoV1 says SpawnSheltered has nothing to do: the group has no v1
// hierarchy (a v2 host places a child with CgroupFD).
var ErrNoV1 = errors.New("the group has no cgroup v1 hierarchy")

// SpawnSheltered calls spawn (which starts the supervisor process) on an OS
// thread that stands, while spawn runs, where the group's supervisor
// belongs on each v1 hierarchy: in the group's shelter on one with pids or
// memory (see ShelterThreads), in the group on the others. The process it
// starts is born there, and every thread it will start with it; its
// launcher thread enters the group alone later, through LauncherTasks. The
// thread goes back to its own groups after spawn and returns to the
// runtime.
//
// Why: on v1, moving another process or thread (a pid written to
// cgroup.procs or tasks, as Attach and ShelterThreads do) takes the
// kernel's lock that holds off every fork in the system, and a writer of it
// first waits for an RCU grace period: ≈ 6–13 ms on an idle machine here,
// during which every other cgroup operation waits too. A thread that moves
// itself ("0" written to tasks) needs neither. On a v2 host (ErrNoV1) the
// child is placed with CgroupFD instead.
//
// Where the thread cannot move, nothing is left moved, spawn is not called
// and the error is returned: the caller starts the process as before and
// uses Attach. The thread goes back after SpawnSheltered has returned; if it
// cannot, it ends with its goroutine (a parent-death signal its child asked
// for then fires, and the sandbox fails rather than run beside a thread of
// the host in its groups).
func (g *Group) SpawnSheltered(spawn func() error) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	var places []string // where the thread goes, per hierarchy ("": stays)
	v1 := false
	for i, h := range g.m.hier {
		if h.v2 || len(g.runs) <= i {
			places = append(places, "")
			continue
		}
		v1 = true
		place := g.runs[i]
		if sheltersFrom(h) {
			shelter, err := g.makeShelter(i)
			if err != nil {
				return err
			}
			place = shelter
		}
		places = append(places, place)
	}
	if !v1 {
		return ErrNoV1
	}
	type outcome struct{ err, back error }
	done := make(chan outcome, 1)
	offLeader := make(chan struct{}, 1)
	var move func()
	move = func() {
		// Unlocked only once the thread is back where it was: a thread
		// left in the group must not run anything else, so it ends with
		// this goroutine instead.
		runtime.LockOSThread()
		if unix.Gettid() == unix.Getpid() {
			// The leader thread never moves: /proc/self/cgroup shows its
			// groups, and NewManager places every new group beneath them
			// (a trial's group made while the leader stood in another's
			// was made inside it, and that one's teardown killed its
			// guest). Held here, it cannot run the goroutine started
			// now, which moves instead.
			go move()
			<-offLeader
			runtime.UnlockOSThread()
			return
		}
		offLeader <- struct{}{}
		own, err := parseGroups("/proc/thread-self/cgroup") // this thread's groups
		if err != nil {
			runtime.UnlockOSThread()
			done <- outcome{err: err}
			return
		}
		homes := make([]string, len(places))
		for i, place := range places {
			if place == "" {
				continue
			}
			home, ok := own[g.m.hier[i].ctrls[0]]
			if !ok {
				runtime.UnlockOSThread()
				done <- outcome{err: fmt.Errorf("this thread's group on %s is unknown", g.m.hier[i].mount)}
				return
			}
			homes[i] = filepath.Join(g.m.hier[i].mount, home)
		}
		var moved []int
		moveBack := func() error {
			var first error
			for _, i := range moved {
				if err := enterSelf(homes[i]); err != nil && first == nil {
					first = err
				}
			}
			return first
		}
		for i, place := range places {
			if place == "" {
				continue
			}
			if err := enterSelf(place); err != nil {
				back := moveBack()
				if back == nil {
					runtime.UnlockOSThread()
				}
				done <- outcome{err: err, back: back}
				return
			}
			moved = append(moved, i)
		}
		// The caller goes on as soon as spawn has returned; the way back
		// (≈ 0.1–0.2 ms) is off its path. A thread that cannot go back
		// ends with this goroutine.
		done <- outcome{err: spawn()}
		if moveBack() == nil {
			runtime.UnlockOSThread()
		}
	}
	go move()
	o := <-done
	if o.back != nil {
		return fmt.Errorf("%w (and the spawning thread could not go back to its own groups: %v)", o.err, o.back)
	}
	if o.err != nil {
		return o.err
	}
	// The supervisor's threads never share the pids limit: no headroom.
	for i, h := range g.m.hier {
		if !h.v2 && slices.Contains(h.ctrls, "pids") && g.limits.Pids > 0 && len(g.dirs) > i {
			if err := os.WriteFile(filepath.Join(g.dirs[i], "pids.max"), []byte(strconv.FormatInt(g.limits.Pids, 10)), 0); err != nil {
				return err
			}
			g.headroom = 0
		}
	}
	return nil
}

// enterSelf moves the calling thread alone into the v1 group dir.
func enterSelf(dir string) error {
	if err := os.WriteFile(filepath.Join(dir, "tasks"), []byte("0"), 0); err != nil {
		return fmt.Errorf("moving a thread into %s: %w", dir, err)
	}
	return nil
}

// LauncherTasks opens the tasks file of the group on each v1 hierarchy it
// shelters its supervisor from (pids, memory): the supervisor's launcher
// thread, born in the shelter (SpawnSheltered), writes "0" to each and so
// enters the group alone, before it starts anything. The caller closes
// them.
func (g *Group) LauncherTasks() ([]*os.File, error) {
	var out []*os.File
	for i, h := range g.m.hier {
		if !sheltersFrom(h) || len(g.runs) <= i {
			continue
		}
		f, err := os.OpenFile(filepath.Join(g.runs[i], "tasks"), os.O_WRONLY|syscall.O_CLOEXEC, 0)
		if err != nil {
			for _, f := range out {
				f.Close()
			}
			return nil, err
		}
		out = append(out, f)
	}
	return out, nil
}

// removeGrace bounds how long Remove waits for killed processes to be gone.
const removeGrace = 10 * time.Second

// Remove kills whatever is left in the group and removes it from every
// hierarchy, then the dryexec parent if nothing else uses it. It is safe to
// call more than once.
func (g *Group) Remove() error {
	g.stats.close()
	if g.fd >= 0 {
		unix.Close(g.fd)
		g.fd = -1
	}
	var first error
	for i, d := range g.dirs {
		if err := removeDir(d, g.m.hier[i].v2); err != nil && first == nil {
			first = err
		}
		os.Remove(filepath.Dir(d)) // the shared parent: fails while others use it
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, d := range g.sheltered {
		if err := removeDir(d, false); err != nil && first == nil {
			first = err
		}
	}
	g.dirs, g.runs, g.sheltered = nil, nil, nil
	return first
}

// removeDir kills every process in the group dir (and its children: the
// sandbox may not create any, but a sweep must not depend on that), then
// removes it. It first just tries: the kernel removes only a group with no
// process and no child group, and that is what a trial's teardown leaves
// (its guest reaped, its pid namespace with it), so most groups go in one
// rmdir, without a listing of the directory or of its processes (a dozen
// system calls per group, on the teardown a run waits for).
func removeDir(dir string, v2 bool) error {
	if err := unix.Rmdir(dir); err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	deadline := time.Now().Add(removeGrace)
	ents, _ := os.ReadDir(dir)
	for _, e := range ents {
		if e.IsDir() {
			removeDir(filepath.Join(dir, e.Name()), v2)
		}
	}
	if v2 {
		os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0) // 5.14+
	}
	wait := time.Millisecond
	for {
		killed := killProcs(dir)
		err := unix.Rmdir(dir)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		// Only a group that still has processes (dying ones) is worth
		// waiting for; anything else (EACCES rootless) will not change.
		if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("removing cgroup %s: %w (%d processes still in it)", dir, err, killed)
		}
		time.Sleep(wait)
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// killProcs SIGKILLs every process listed in dir's cgroup.procs and says how
// many there were. A process that forks meanwhile is caught by the next round.
func killProcs(dir string) int {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return 0
	}
	n, self := 0, os.Getpid()
	for _, f := range strings.Fields(string(b)) {
		// Never this process: a thread of it may be passing through
		// (SpawnSheltered's, on its way back).
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 && pid != self {
			unix.Kill(pid, unix.SIGKILL)
			n++
		}
	}
	return n
}

// Sweep removes the dryexec groups whose creating process is gone (a killed
// daemon, a crashed test), killing what is left in them first, in every
// hierarchy of this host. It walks each whole tree (bounded), since the dead
// process may have run in another group than this one. It returns the number
// of groups removed.
func Sweep() (int, error) {
	hier, err := discover("")
	if err != nil {
		return 0, err
	}
	removed := 0
	var first error
	starts := map[int]uint64{}
	for _, h := range hier {
		visited := 0
		var walk func(dir string, depth int)
		walk = func(dir string, depth int) {
			ents, err := os.ReadDir(dir)
			if err != nil {
				return
			}
			for _, e := range ents {
				if !e.IsDir() || visited > maxSweepDirs {
					continue
				}
				visited++
				p := filepath.Join(dir, e.Name())
				if e.Name() != ParentName {
					if depth < maxSweepDepth {
						walk(p, depth+1)
					}
					continue
				}
				groups, _ := os.ReadDir(p)
				for _, gd := range groups {
					if !gd.IsDir() || !orphan(gd.Name(), starts) {
						continue
					}
					if err := removeDir(filepath.Join(p, gd.Name()), h.v2); err != nil {
						if first == nil {
							first = err
						}
						continue
					}
					removed++
				}
				os.Remove(p) // only if empty
			}
		}
		walk(h.mount, 0)
	}
	return removed, first
}

// Bounds of Sweep's walk: cgroup trees are shallow; a pathological one must
// not make every start slow.
const (
	maxSweepDepth = 8
	maxSweepDirs  = 20000
)

// Leftovers lists the dryexec groups that exist now in every hierarchy (for
// tests and doctor): paths of group dirs, whoever created them.
func Leftovers() []string {
	var out []string
	for _, m := range []string{"/sys/fs/cgroup"} {
		filepath.WalkDir(m, func(p string, d fs.DirEntry, err error) error {
			if err != nil || !d.IsDir() {
				return nil
			}
			if strings.Count(p, "/") > 14 {
				return filepath.SkipDir
			}
			if filepath.Base(filepath.Dir(p)) == ParentName {
				out = append(out, p)
				return filepath.SkipDir
			}
			return nil
		})
	}
	return out
}

// Probe says how sandbox limits would be enforced here: it makes a group with
// the default limits and removes it at once. The error is what a trial would
// fall back from (ErrUnavailable) or fail with.
func Probe(opt Options) (string, error) {
	m, err := NewManager(opt)
	if err != nil {
		return "", err
	}
	g, warnings, err := m.New("probe", dryexec.Limits{})
	if err != nil {
		return "", err
	}
	l := g.Limits()
	parents := m.Parents()
	if err := g.Remove(); err != nil {
		return "", err
	}
	s := fmt.Sprintf("%s, under %s; defaults: memory %s, %d tasks, cpu weight %d, no cpu quota",
		m.Version(), strings.Join(parents, ", "), human(l.MemoryBytes), l.Pids, l.CPUWeight)
	for _, w := range warnings {
		s += "; " + w
	}
	return s, nil
}
