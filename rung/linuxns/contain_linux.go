package linuxns

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/cgroup"
	"github.com/dryexec/dryexec/wire"
)

// Limiter bounds one guest and everything it starts: a cgroup with the
// sandbox's limits, or — where this process cannot create cgroups (rootless on
// a v1 host) — rlimits, with a warning saying what is not enforced.
type Limiter struct {
	group    *cgroup.Group // nil: the rlimit fallback
	limits   dryexec.Limits
	before   cgroup.Stats
	warnings []string
}

// NewLimiter makes the group called name (a trial or session id) with limits
// l (zero fields: defaults). It fails only on bad limits or a cgroup error
// other than "cannot create groups here". It removes no other group: what a
// killed dryexec left is swept at start-up (runner.Recover), explicitly.
func (r *Rung) NewLimiter(name string, l dryexec.Limits) (*Limiter, error) {
	if err := l.Check(); err != nil {
		return nil, err
	}
	m, err := cgroup.NewManager(r.Cgroups)
	if err == nil {
		g, warnings, gerr := m.New(name, l)
		if gerr == nil {
			return &Limiter{group: g, limits: g.Limits(), before: g.Stats(), warnings: warnings}, nil
		}
		err = gerr
	}
	if !errors.Is(err, cgroup.ErrUnavailable) {
		return nil, err
	}
	l = cgroup.Defaults(l)
	lim := &Limiter{limits: l}
	w := fmt.Sprintf("%v: limits fall back to rlimits", err)
	if l.Pids > 0 {
		w += fmt.Sprintf(": at most %d processes (RLIMIT_NPROC, counted within the sandbox's user namespace)", l.Pids)
	}
	if l.MemoryBytes > 0 {
		w += fmt.Sprintf(", %d bytes of data per process (RLIMIT_DATA), not for the sandbox as a whole", l.MemoryBytes)
	}
	lim.warnings = append(lim.warnings, w+"; no CPU limit; hitting a limit is not recorded as a violation")
	return lim, nil
}

// Warnings say which limits are not enforced as asked.
func (l *Limiter) Warnings() []string { return append([]string(nil), l.warnings...) }

// Limits are the limits in force, defaults filled in.
func (l *Limiter) Limits() dryexec.Limits { return l.limits }

// prepare makes the child start inside the group (v2: clone3 into it).
func (l *Limiter) prepare(attr *unix.SysProcAttr) {
	if l.group != nil && l.group.CgroupFD() >= 0 {
		attr.UseCgroupFD = true
		attr.CgroupFD = l.group.CgroupFD()
	}
}

// spawnBorn starts cmd with the guest born where it belongs on a cgroup v1
// host (cgroup.Group.SpawnSheltered): its threads in the shelter, and the
// files its launcher thread enters the group through passed after cmd's
// own; it sets *fds to their numbers in the guest. started says whether
// cmd was started (then err is what went wrong after, and the caller kills
// it). Not started, err is cmd.Start's failure, or nil where the limiter
// cannot do it (no group, a v2 host, a thread that could not move): then
// nothing was tried and the caller starts cmd itself.
func (l *Limiter) spawnBorn(cmd *exec.Cmd, fds *[]int) (started bool, err error) {
	if l == nil || l.group == nil {
		return false, nil
	}
	tasks, err := l.group.LauncherTasks()
	if err != nil || len(tasks) == 0 {
		return false, nil
	}
	defer func() {
		for _, f := range tasks {
			f.Close()
		}
	}()
	files := cmd.ExtraFiles
	cmd.ExtraFiles = append(slices.Clip(files), tasks...)
	var nums []int
	for i := range tasks {
		nums = append(nums, 3+len(files)+i)
	}
	var startErr error
	called := false
	err = l.group.SpawnSheltered(func() error {
		called = true
		startErr = cmd.Start()
		return startErr
	})
	if cmd.Process == nil {
		cmd.ExtraFiles = files
		if called {
			return false, startErr
		}
		return false, nil
	}
	*fds = nums
	return true, err
}

// attach puts a started guest under the limits before it is told to run
// anything: v1 groups by pid; the fallback by prlimit, which the command
// inherits.
func (l *Limiter) attach(pid int) error {
	if l.group != nil {
		return l.group.Attach(pid)
	}
	set := func(res int, v int64) error {
		if v <= 0 {
			return nil
		}
		lim := unix.Rlimit{Cur: uint64(v), Max: uint64(v)}
		if err := unix.Prlimit(pid, res, &lim, nil); err != nil {
			return fmt.Errorf("setting rlimit %d of the guest: %w", res, err)
		}
		return nil
	}
	// The guest's own threads count against RLIMIT_NPROC too: leave them
	// room. The command gets the limit itself (CommandNPROC).
	if l.limits.Pids > 0 {
		if err := set(unix.RLIMIT_NPROC, l.limits.Pids+guestThreads); err != nil {
			return err
		}
	}
	return set(unix.RLIMIT_DATA, l.limits.MemoryBytes)
}

// CommandNPROC is the RLIMIT_NPROC the guest puts on the command (0: none):
// under the fallback, the pids limit; the guest itself has guestThreads more
// (attach).
func (l *Limiter) CommandNPROC() int64 {
	if l == nil || l.group != nil {
		return 0
	}
	return l.limits.Pids
}

// ShelterSupervisor moves a guest's own threads out of the pids limit (see
// cgroup.Group.ShelterThreads). The guest starts every command from one
// confined launcher thread and is idle now (a trial's sandbox waiting for its
// command, a session between execs): all its threads but the launcher leave the pids limit at once, and
// every later exec still starts inside it. The launcher is the thread with a
// seccomp filter (the guest confines that thread alone); without exactly one
// such thread nothing moves and the limit keeps its headroom.
func (l *Limiter) ShelterSupervisor(pid int) error {
	if l.group == nil {
		return nil
	}
	tasks := "/proc/" + strconv.Itoa(pid) + "/task"
	ents, err := os.ReadDir(tasks)
	if err != nil {
		return err
	}
	launcher := 0
	for _, e := range ents {
		b, _ := os.ReadFile(tasks + "/" + e.Name() + "/status")
		if strings.Contains(string(b), "\nSeccomp:\t2\n") {
			if launcher != 0 {
				return nil
			}
			launcher, _ = strconv.Atoi(e.Name())
		}
	}
	if launcher == 0 {
		return nil
	}
	return l.group.ShelterThreads(pid, launcher)
}

// guestThreads is headroom for the guest supervisor's own threads.
const guestThreads = 32

// Violations are the limits hit since the group was made (or since the last
// call), and the group's peak memory (0 without a group).
func (l *Limiter) Violations() ([]dryexec.Violation, int64) {
	if l.group == nil {
		return nil, 0
	}
	now := l.group.Stats()
	v := cgroup.Violations(l.limits, l.group.PidsHeadroom(), l.before, now)
	l.before = now
	return v, now.PeakMemBytes
}

// Close kills what is left in the group and removes it.
func (l *Limiter) Close() error {
	if l == nil || l.group == nil {
		return nil
	}
	return l.group.Remove()
}

// Homes are the home directories whose credentials are masked by default: the
// calling user's, and as root also /root and every /home/… of /etc/passwd,
// since a root sandbox could read all of them.
func Homes() []string {
	var out []string
	seen := map[string]bool{}
	add := func(h string) {
		if h = filepath.Clean(h); strings.HasPrefix(h, "/") && h != "/" && !seen[h] {
			seen[h] = true
			out = append(out, h)
		}
	}
	if h := os.Getenv("HOME"); h != "" {
		add(h)
	}
	if u, err := user.Current(); err == nil {
		add(u.HomeDir)
	}
	if os.Geteuid() != 0 {
		return out
	}
	add("/root")
	f, err := os.Open("/etc/passwd")
	if err != nil {
		return out
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) >= 6 && strings.HasPrefix(fields[5], "/home/") {
			add(fields[5])
		}
	}
	return out
}

// ResolveMasks turns a spec's masks into the host paths to cover: defaults
// beneath Homes() unless noDefaults, plus extra; symlinks resolved (the
// sandbox must see the link's target empty), paths that do not exist dropped.
func ResolveMasks(extra []string, noDefaults bool) ([]string, error) {
	paths, err := dryexec.MaskPaths(Homes(), extra, noDefaults)
	if err != nil {
		return nil, err
	}
	return resolveMaskPaths(paths), nil
}

// Cover is what a sandbox's view covers of the host, resolved: Masks (the
// credentials, each seen as a mirror of its names, reads recorded) and
// Hidden (dryexec's own state, each seen as an empty, unreadable,
// read-only directory or file).
type Cover struct {
	Masks, Hidden []string
}

// ResolveCover is ResolveMasks(extra, noDefaults) together with dryexec's
// own paths: own (a daemon's home, state dir, socket) and the default places
// (ownPathDefaults), which no option turns off. A mask at or beneath a
// hidden path is dropped (the hidden cover is over it), and so is a hidden
// path beneath another.
func ResolveCover(extra []string, noDefaults bool, own []string) (Cover, error) {
	homes := Homes()
	masks, hidden, err := coverPaths(homes, extra, noDefaults, own)
	if err != nil {
		return Cover{}, err
	}
	return resolveCover(masks, hidden), nil
}

// coverPaths are the unresolved paths of ResolveCover.
func coverPaths(homes, extra []string, noDefaults bool, own []string) (masks, hidden []string, err error) {
	if masks, err = dryexec.MaskPaths(homes, extra, noDefaults); err != nil {
		return nil, nil, err
	}
	for _, p := range append(ownPathDefaults(homes), own...) {
		if p = path.Clean(p); strings.HasPrefix(p, "/") && p != "/" && !strings.ContainsRune(p, 0) {
			hidden = append(hidden, p)
		}
	}
	return masks, hidden, nil
}

// ownPathDefaults are where dryexec keeps its state unless told otherwise
// (dryexec.DefaultHome, server.DefaultSocket), for the environment of this
// process and, beneath every home of homes, the XDG default: a sandbox of
// root's must not read the token or trials of a daemon another user runs
// either.
func ownPathDefaults(homes []string) []string {
	var out []string
	if d := os.Getenv("DRYEXEC_HOME"); d != "" {
		if abs, err := filepath.Abs(d); err == nil {
			out = append(out, abs)
		}
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		out = append(out, d+"/dryexec")
	}
	for _, h := range homes {
		out = append(out, h+"/.local/state/dryexec")
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		out = append(out, d+"/dryexec.sock")
	}
	return append(out, "/run/user/"+strconv.Itoa(os.Getuid())+"/dryexec.sock")
}

// mountAliases adds to paths the other host paths that reach the same
// directory or file through another mount of its filesystem (a parent
// bind-mounted elsewhere, or the path itself): the sandbox overlays every
// host mount on its own, so each such path must be covered too, the masked
// credentials as well as dryexec's own state (a mask on ~/.ssh alone left
// ALIAS/.ssh showing the key: test/escape TestMaskedSecretViaBindAlias). An
// alias counts only if it is the same inode (a mount over it shadows nothing
// of ours). infos is the mount table (nil: unreadable, no aliases), read
// once per resolution by resolveCover (cached with the masks by a Pool).
func mountAliases(infos []*mountinfo.Info, paths []string) []string {
	if len(paths) == 0 || infos == nil {
		return paths
	}
	out := slices.Clone(paths)
	for _, p := range paths {
		var st unix.Stat_t
		if unix.Stat(p, &st) != nil {
			continue
		}
		// The mount p is on: the deepest mount point above it, the last
		// one listed there (the one on top).
		var on *mountinfo.Info
		for _, mi := range infos {
			if under(p, []string{mi.Mountpoint}) && (on == nil || len(mi.Mountpoint) >= len(on.Mountpoint)) {
				on = mi
			}
		}
		if on == nil {
			continue
		}
		fsPath := path.Join(on.Root, strings.TrimPrefix(p, strings.TrimSuffix(on.Mountpoint, "/")))
		for _, mi := range infos {
			if mi == on || mi.Major != on.Major || mi.Minor != on.Minor || !under(fsPath, []string{mi.Root}) {
				continue
			}
			alias := path.Join(mi.Mountpoint, strings.TrimPrefix(fsPath, strings.TrimSuffix(mi.Root, "/")))
			var ast unix.Stat_t
			if unix.Stat(alias, &ast) == nil && ast.Dev == st.Dev && ast.Ino == st.Ino && !slices.Contains(out, alias) {
				out = append(out, alias)
			}
		}
	}
	return out
}

// resolveCover resolves both lists (resolveMaskPaths) and drops what another
// hidden path already covers.
func resolveCover(masks, hidden []string) Cover {
	// One read of the mount table for both lists; unreadable, the paths
	// go without their aliases.
	infos, err := mountinfo.GetMounts(nil)
	if err != nil {
		infos = nil
	}
	h := mountAliases(infos, resolveMaskPaths(hidden))
	slices.Sort(h) // a parent sorts before what is beneath it
	var c Cover
	beneath := func(p string) bool {
		for _, q := range c.Hidden {
			if p == q || strings.HasPrefix(p, q+"/") {
				return true
			}
		}
		return false
	}
	for _, p := range h {
		if !beneath(p) {
			c.Hidden = append(c.Hidden, p)
		}
	}
	for _, p := range mountAliases(infos, resolveMaskPaths(masks)) {
		if !beneath(p) {
			c.Masks = append(c.Masks, p)
		}
	}
	return c
}

// resolveMaskPaths is ResolveMasks after the paths are known.
func resolveMaskPaths(paths []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, p := range paths {
		// Most default masks do not exist: one lstat says so (it follows
		// links in the parents, so a path reachable only through one is
		// seen), and only what exists pays for resolving its links.
		var st unix.Stat_t
		if unix.Lstat(p, &st) != nil {
			continue
		}
		real, err := filepath.EvalSymlinks(p)
		if err != nil || real == "/" || seen[real] {
			continue
		}
		seen[real] = true
		out = append(out, real)
	}
	return out
}

// MaskWatch finds reads of masked paths in a guest's view, from outside it:
// every mask entry starts with atime and mtime wire.MaskAtime, and a read or a
// directory listing moves the atime (guest/mask_linux.go). Pin holds each mask
// mount by an fd once the view is built and before the command runs, so the
// check looks at the masks themselves however the sandbox rearranged its view
// and even after the guest has exited. Each path is reported once.
type MaskWatch struct {
	mu      sync.Mutex // guards the fields below
	pins    []maskPin
	seen    map[string]bool
	warning string // why Pin could not hold the masks, if it could not
}

// Warning says why reads of masks cannot be recorded, or "".
func (w *MaskWatch) Warning() string {
	if w == nil {
		return ""
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.warning
}

type maskPin struct {
	path string // the masked host path
	fd   int    // O_PATH fd of the mask's root in the guest's view
}

// NewMaskWatch returns an empty watch; Pin fills it.
func NewMaskWatch() *MaskWatch { return &MaskWatch{seen: map[string]bool{}} }

// Pin opens each of masks in the view of guest process pid, which must have
// mounted them and not yet started anything of the sandbox's. Paths are
// resolved inside the guest's root without following any symlink; a path the
// guest did not mask (it did not exist) is skipped. If the guest's root cannot
// be opened, Warning says so and Check finds nothing (the masks still hide).
func (w *MaskWatch) Pin(pid int, masks []string) error {
	if len(masks) == 0 {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	root, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/root", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		// The masks are in place all the same; only the record is lost.
		w.warning = fmt.Sprintf("masked paths are hidden, but reads of them cannot be recorded: opening the guest's root: %v", err)
		return nil
	}
	defer unix.Close(root)
	w.pinAt(root, masks)
	return nil
}

// PinRoot is Pin for a view whose root is the directory root (a descriptor)
// rather than a guest's own root: the gvisor rung's view, which runsc serves
// to its sandbox from the host side.
func (w *MaskWatch) PinRoot(root int, masks []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pinAt(root, masks)
}

// pinAt pins masks beneath root; w.mu is held.
func (w *MaskWatch) pinAt(root int, masks []string) {
	for _, p := range masks {
		fd, err := unix.Openat2(root, strings.TrimPrefix(p, "/"), &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_NOFOLLOW | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err != nil {
			continue
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil || st.Mtim.Sec != wire.MaskAtime || st.Mtim.Nsec != 0 {
			unix.Close(fd) // not a mask: the path did not exist on the host
			continue
		}
		w.pins = append(w.pins, maskPin{path: p, fd: fd})
	}
}

// Check returns a {kind: secret} violation for each masked path read since
// the last Check.
func (w *MaskWatch) Check() []dryexec.Violation {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []dryexec.Violation
	budget := maskCheckMax
	var walk func(fd int, p string, depth int)
	walk = func(fd int, p string, depth int) {
		if budget--; budget < 0 {
			return
		}
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil {
			return
		}
		if (st.Atim.Sec != wire.MaskAtime || st.Atim.Nsec != 0) && !w.seen[p] {
			w.seen[p] = true
			out = append(out, dryexec.Violation{Kind: "secret", Detail: p})
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR || depth >= maskCheckDepth {
			return
		}
		// O_NOATIME: our own listing must not look like the sandbox's.
		dfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOATIME|unix.O_CLOEXEC, 0)
		if err != nil {
			return
		}
		d := os.NewFile(uintptr(dfd), p)
		names, _ := d.Readdirnames(-1)
		for _, n := range names {
			cfd, err := unix.Openat(dfd, n, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
			if err != nil {
				continue
			}
			walk(cfd, p+"/"+n, depth+1)
			unix.Close(cfd)
		}
		d.Close()
	}
	for _, pin := range w.pins {
		walk(pin.fd, pin.path, 0)
	}
	return out
}

// Close releases the pinned masks.
func (w *MaskWatch) Close() {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, p := range w.pins {
		unix.Close(p.fd)
	}
	w.pins = nil
}

// Bounds of a mask check (the guest mirrors at most 1024 entries, 4 deep).
const (
	maskCheckMax   = 2048
	maskCheckDepth = 4
)

// contained adds to d what the containment saw once the command is gone:
// limits hit, masked secrets read, the group's peak memory, and warnings for
// limits not enforced as asked.
func (t *trial) contained(d *dryexec.StateDelta) {
	v, peak := t.lim.Violations()
	d.Violations = append(d.Violations, v...)
	d.Violations = append(d.Violations, t.watch.Check()...)
	d.Memory.PeakRSSBytes = peak
	d.Warnings = append(d.Warnings, t.lim.Warnings()...)
	if w := t.watch.Warning(); w != "" {
		d.Warnings = append(d.Warnings, w)
	}
}
