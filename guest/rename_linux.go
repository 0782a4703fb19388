package guest

import (
	"bufio"
	"context"
	"errors"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/containment/seccomp"
	"github.com/dryexec/dryexec/fswalk"
)

// A renamer performs, for the sandbox's processes, the renames of
// directories that a rootless overlay refuses.
//
// In a user namespace overlayfs refuses redirect_dir=on, so rename(2) of a
// directory that comes from the lower layer (the host's, or a session's
// baseline) fails with EXDEV, where on the host it succeeds: mv copes by
// copying, a program that calls rename(2) itself (Python's os.rename, node's
// fs.renameSync, Go's os.Rename) fails. Rootless, the seccomp filter
// therefore hands rename, renameat and renameat2 to the supervisor
// (seccomp.Rule.Handled). A call whose source is not a directory, or that the
// renamer cannot judge, continues as the caller made it
// (SECCOMP_USER_NOTIF_FLAG_CONTINUE), which is always safe. For a directory,
// a worker thread that holds exactly the caller's rights makes the call
// itself, and where the overlay says EXDEV moves the tree as the kernel would
// with a redirect: a new directory, every child renamed into it (a file's
// copy-up is the overlay's own), the old directory removed, then the new
// one's mode, group, xattrs and times set to the old one's.
//
// What keeps it safe (docs/containment.md, "Renames the supervisor
// performs"): the worker is a thread of its own, never handed back to the Go
// scheduler (it ends with its goroutine), that takes the caller's fsuid,
// fsgid and groups, drops every capability, sets no_new_privs and enters the
// sandbox's Landlock rulesets before it touches a path; it runs in the
// sandbox's mount namespace with the sandbox's root (checked against the
// caller's), and resolves the caller's paths relative to handles on the
// caller's cwd or dirfd without following magic links (the worker's
// /proc/self is the guest's). So every call it makes, the caller could have
// made itself: a race by the caller (a symlink swapped in, a directory
// changed meanwhile) gets it no more than it could do alone. A caller with
// any capability (a user namespace of its own) is not helped: the worker
// could not match its rights exactly.
type renamer struct {
	// rulesets are the Landlock rulesets the worker enters (the launcher's
	// and the nested one a trial's command enters), owned; none without
	// Landlock.
	rulesets []int
	mntNS    string // the guest's mount namespace, as /proc/self/ns/mnt names it
	root     unix.Stat_t
	pool     workerPool
	// afterStep is handed to each link's renameWork (a test's hook).
	afterStep func(step string)
}

// renameCalls are the calls the renamer handles.
var renameCalls = []string{"rename", "renameat", "renameat2"}

func newRenamer(c *confinement) (*renamer, error) {
	r := &renamer{}
	for _, fd := range []int{c.landlock, c.nested} {
		if fd < 0 {
			continue
		}
		d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			r.close()
			return nil, err
		}
		r.rulesets = append(r.rulesets, d)
	}
	ns, err := os.Readlink("/proc/self/ns/mnt")
	if err == nil {
		err = unix.Stat("/", &r.root)
	}
	if err != nil {
		r.close()
		return nil, err
	}
	r.mntNS = ns
	return r, nil
}

func (r *renamer) close() {
	r.pool.close()
	for _, fd := range r.rulesets {
		unix.Close(fd)
	}
	r.rulesets = nil
}

// renameReq is one rename call's arguments.
type renameReq struct {
	oldDir, newDir   int32 // dirfds, AT_FDCWD for rename
	oldPath, newPath string
	flags            uint
}

// callerCreds are the notified thread's credentials, as the guest's user
// namespace sees them.
type callerCreds struct {
	fsuid, fsgid int
	groups       []int
	capEff       uint64
	umask        uint32
}

// inGroup says whether gid is the caller's filesystem group or one of its
// supplementary groups (the kernel's in_group_p).
func (cr *callerCreds) inGroup(gid uint32) bool {
	return uint32(cr.fsgid) == gid || slices.Contains(cr.groups, int(gid))
}

var contAnswer = seccomp.Answer{Continue: true}

// handle answers one notified rename call: at once (on the supervisor's
// goroutine, it must be quick) for all but a dir, which slow renames on a
// worker thread.
func (r *renamer) handle(ctx context.Context, n *seccomp.Notification) (seccomp.Answer, func() seccomp.Answer) {
	if slices.Contains(linkCalls, seccomp.Name(n.Nr)) {
		return r.handleLink(ctx, n)
	}
	req, ok := decodeRename(n)
	if !ok || req.flags&^unix.RENAME_NOREPLACE != 0 {
		// RENAME_EXCHANGE of a host dir stays EXDEV (docs/limits.md);
		// RENAME_WHITEOUT needs CAP_MKNOD, which no caller here has.
		return contAnswer, nil
	}
	proc := "/proc/" + strconv.Itoa(n.PID)
	var err error
	if req.oldPath, err = readCString(n.PID, n.Args[argOld(n)]); err != nil {
		return contAnswer, nil
	}
	if req.newPath, err = readCString(n.PID, n.Args[argNew(n)]); err != nil {
		return contAnswer, nil
	}
	// Only a directory can need help; this look is the guest's own and
	// decides nothing but whether to look closer.
	var st unix.Stat_t
	if unix.Lstat(magicPath(proc, req.oldDir, req.oldPath), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return contAnswer, nil
	}
	cr, oldBase, newBase, ok := r.prepare(n, proc, req.oldDir, req.oldPath, req.newDir, req.newPath)
	if !ok {
		return contAnswer, nil
	}
	return seccomp.Answer{}, func() seccomp.Answer {
		defer closeBase(oldBase)
		defer closeBase(newBase)
		return r.worker(cr, func() seccomp.Answer {
			w := &renameWork{ctx: ctx, n: n, creds: cr}
			return w.rename(oldBase, newBase, req)
		})
	}
}

// prepare reads the caller's credentials and opens what its two paths are
// relative to, once the caller proves one the worker can stand in for (no
// capability, the sandbox's mount namespace and root). ok false: let the
// call through as the caller made it.
func (r *renamer) prepare(n *seccomp.Notification, proc string, oldDir int32, oldPath string, newDir int32, newPath string) (cr *callerCreds, oldBase, newBase int, ok bool) {
	cr, err := readCreds(proc)
	if err != nil || cr.capEff != 0 {
		return nil, -1, -1, false
	}
	if ns, err := os.Readlink(proc + "/ns/mnt"); err != nil || ns != r.mntNS {
		return nil, -1, -1, false
	}
	var root unix.Stat_t
	if unix.Stat(proc+"/root", &root) != nil || root.Dev != r.root.Dev || root.Ino != r.root.Ino {
		return nil, -1, -1, false
	}
	if oldBase, err = openBase(proc, oldDir, oldPath); err != nil {
		return nil, -1, -1, false
	}
	if newBase, err = openBase(proc, newDir, newPath); err != nil {
		closeBase(oldBase)
		return nil, -1, -1, false
	}
	// What was read of /proc/PID was the caller's only if it still waits.
	if !n.Valid() {
		closeBase(oldBase)
		closeBase(newBase)
		return nil, -1, -1, false
	}
	return cr, oldBase, newBase, true
}

// worker runs f on a thread that holds exactly the caller's rights
// (become) and returns its answer: a thread a call with the same credentials
// left idle, else a new one.
func (r *renamer) worker(cr *callerCreds, f func() seccomp.Answer) seccomp.Answer {
	key := credsKey(cr)
	done := make(chan seccomp.Answer, 1)
	if jobs := r.pool.get(key); jobs != nil {
		jobs <- func() { done <- f() }
		return <-done
	}
	jobs := make(chan func())
	go func() {
		// Never unlocked: the thread's credentials die with it.
		runtime.LockOSThread()
		if err := r.become(cr); err != nil {
			done <- contAnswer
			return
		}
		done <- f()
		for r.pool.put(key, jobs) {
			job, ok := <-jobs
			if !ok {
				return
			}
			job()
		}
	}()
	return <-done
}

// workerPool keeps worker threads that finished a call, by the credentials
// they hold, for the next call with the same: making a thread and its
// become cost most of a quick call (a link of a file made in the trial:
// 430-460 us a call with a new thread each; see docs/containment.md). A
// thread serves only callers with its exact credentials (fsuid, fsgid,
// groups; none has a capability), and every worker enters the same Landlock
// rulesets, so a kept thread has no right a new one would not.
type workerPool struct {
	mu     sync.Mutex
	idle   map[string][]chan func()
	closed bool
}

// maxIdleWorkers bounds the idle threads kept for one set of credentials.
const maxIdleWorkers = 2

// get takes an idle thread's job channel for key, or nil.
func (p *workerPool) get(key string) chan func() {
	p.mu.Lock()
	defer p.mu.Unlock()
	l := p.idle[key]
	if len(l) == 0 {
		return nil
	}
	jobs := l[len(l)-1]
	p.idle[key] = l[:len(l)-1]
	return jobs
}

// put keeps an idle thread's job channel; false: the thread must end.
func (p *workerPool) put(key string, jobs chan func()) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || len(p.idle[key]) >= maxIdleWorkers {
		return false
	}
	if p.idle == nil {
		p.idle = map[string][]chan func(){}
	}
	p.idle[key] = append(p.idle[key], jobs)
	return true
}

// close ends the idle threads and any that finish later.
func (p *workerPool) close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.closed = true
	for _, l := range p.idle {
		for _, jobs := range l {
			close(jobs)
		}
	}
	p.idle = nil
}

// credsKey names a caller's credentials: fsuid, fsgid and sorted groups.
func credsKey(cr *callerCreds) string {
	b := strconv.AppendInt(nil, int64(cr.fsuid), 10)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(cr.fsgid), 10)
	for _, g := range slices.Sorted(slices.Values(cr.groups)) {
		b = append(b, ',')
		b = strconv.AppendInt(b, int64(g), 10)
	}
	return string(b)
}

// decodeRename reads the call's arguments from its registers.
func decodeRename(n *seccomp.Notification) (renameReq, bool) {
	req := renameReq{oldDir: unix.AT_FDCWD, newDir: unix.AT_FDCWD}
	switch seccomp.Name(n.Nr) {
	case "rename":
	case "renameat":
		req.oldDir, req.newDir = int32(n.Args[0]), int32(n.Args[2])
	case "renameat2":
		req.oldDir, req.newDir, req.flags = int32(n.Args[0]), int32(n.Args[2]), uint(uint32(n.Args[4]))
	default:
		return req, false
	}
	return req, true
}

func argOld(n *seccomp.Notification) int {
	if seccomp.Name(n.Nr) == "rename" {
		return 0
	}
	return 1
}

func argNew(n *seccomp.Notification) int {
	if seccomp.Name(n.Nr) == "rename" {
		return 1
	}
	return 3
}

// readCString reads a path argument (at most PATH_MAX bytes with its NUL)
// from the caller's memory, with process_vm_readv: one call per page and no
// file to open, on the path every rename of the sandbox takes.
func readCString(pid int, addr uint64) (string, error) {
	if addr == 0 {
		return "", unix.EFAULT
	}
	var out []byte
	var page [4096]byte
	for len(out) < unix.PathMax {
		// A page at a time: a read into an unmapped page fails whole.
		size := min(unix.PathMax-len(out), 4096-int(addr%4096))
		local := []unix.Iovec{{Base: &page[0]}}
		local[0].SetLen(size)
		remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: size}}
		n, err := unix.ProcessVMReadv(pid, local, remote, 0)
		if n <= 0 {
			if err == nil {
				err = unix.EFAULT
			}
			return "", err
		}
		if i := slices.Index(page[:n], 0); i >= 0 {
			return string(append(out, page[:i]...)), nil
		}
		out = append(out, page[:n]...)
		addr += uint64(n)
	}
	return "", unix.ENAMETOOLONG
}

// magicPath names p as the caller resolves it, through /proc/PID (for the
// guest's own first look only).
func magicPath(proc string, dir int32, p string) string {
	switch {
	case strings.HasPrefix(p, "/"):
		return proc + "/root" + p
	case dir == unix.AT_FDCWD:
		return proc + "/cwd/" + p
	}
	return proc + "/fd/" + strconv.Itoa(int(dir)) + "/" + p
}

// openBase opens what p is relative to: the caller's cwd or dirfd, or -1
// (AT_FDCWD: the worker's own root, checked equal to the caller's) for an
// absolute p.
func openBase(proc string, dir int32, p string) (int, error) {
	switch {
	case p == "":
		return -1, unix.ENOENT
	case strings.HasPrefix(p, "/"):
		return unix.AT_FDCWD, nil
	case dir == unix.AT_FDCWD:
		return unix.Open(proc+"/cwd", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	}
	return unix.Open(proc+"/fd/"+strconv.Itoa(int(dir)), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
}

func closeBase(fd int) {
	if fd >= 0 {
		unix.Close(fd)
	}
}

// readCreds reads a thread's fsuid, fsgid, groups and effective capabilities.
func readCreds(proc string) (*callerCreds, error) {
	f, err := os.Open(proc + "/status")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cr := &callerCreds{fsuid: -1, fsgid: -1, capEff: ^uint64(0)}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		fields := strings.Fields(v)
		switch k {
		case "Uid", "Gid":
			if len(fields) != 4 {
				return nil, errors.New("bad " + k)
			}
			id, err := strconv.Atoi(fields[3]) // real, effective, saved, fs
			if err != nil {
				return nil, err
			}
			if k == "Uid" {
				cr.fsuid = id
			} else {
				cr.fsgid = id
			}
		case "Groups":
			for _, g := range fields {
				id, err := strconv.Atoi(g)
				if err != nil {
					return nil, err
				}
				cr.groups = append(cr.groups, id)
			}
		case "Umask":
			if len(fields) == 1 {
				if m, err := strconv.ParseUint(fields[0], 8, 32); err == nil {
					cr.umask = uint32(m)
				}
			}
		case "CapEff":
			if len(fields) != 1 {
				return nil, errors.New("bad CapEff")
			}
			c, err := strconv.ParseUint(fields[0], 16, 64)
			if err != nil {
				return nil, err
			}
			cr.capEff = c
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if cr.fsuid < 0 || cr.fsgid < 0 {
		return nil, errors.New("no Uid or Gid")
	}
	return cr, nil
}

// become gives the calling (locked, never unlocked) thread the caller's
// rights and no more: its groups, fsgid and fsuid, no capability at all,
// no_new_privs, and the sandbox's Landlock domain. Every step is the
// thread's own (raw system calls, not Go's all-threads setters).
func (r *renamer) become(cr *callerCreds) error {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return err
	}
	have, err := unix.Getgroups()
	if err != nil {
		return err
	}
	slices.Sort(have)
	want := slices.Sorted(slices.Values(cr.groups))
	if !slices.Equal(have, want) {
		// Rootless, setgroups is usually denied in the guest's user
		// namespace; the caller's groups are then the guest's anyway.
		if err := unix.Setgroups(want); err != nil {
			return err
		}
	}
	unix.SetfsgidRetGid(cr.fsgid)
	unix.SetfsuidRetUid(cr.fsuid)
	if g, _ := unix.SetfsgidRetGid(-1); g != cr.fsgid {
		return errors.New("setfsgid")
	}
	if u, _ := unix.SetfsuidRetUid(-1); u != cr.fsuid {
		return errors.New("setfsuid")
	}
	var data [2]unix.CapUserData
	if err := unix.Capset(&unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}, &data[0]); err != nil {
		return err
	}
	for _, rs := range r.rulesets {
		if _, _, e := unix.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, uintptr(rs), 0, 0); e != 0 {
			return e
		}
	}
	return nil
}

// renameWork is one rename the worker thread performs.
type renameWork struct {
	ctx   context.Context
	n     *seccomp.Notification
	creds *callerCreds
	// links maps a hard-linked file (the overlay's dev and ino) to its new
	// path beneath the new dir, so its other names are linked to it rather
	// than copied up apart.
	links map[[2]uint64]string
	// modes are the modes of the source dirs the move had to open up.
	modes map[[2]uint64]uint32
	top   int // the new dir, once made
	mnt   uint64
	// afterStep, when set, runs after each step of a link swap (swapLink):
	// a test's way of racing the caller's other threads against it.
	afterStep func(step string)
}

// errCannot: the tree cannot be moved exactly as the caller's own rights
// allow (a dir it does not own, a mount inside, …): the call fails with the
// overlay's EXDEV, as it did before the renamer.
var errCannot = errors.New("cannot emulate")

// errGone: the caller died or the sandbox is ending.
var errGone = errors.New("the caller is gone")

// maxRenameDepth bounds the depth of a tree moved by hand (two fds a level).
const maxRenameDepth = 128

// splitPath splits p into the path of its parent and its last name, which
// keeps p's trailing slashes (the kernel gives them their meaning).
func splitPath(p string) (dir, name string, ok bool) {
	q := strings.TrimRight(p, "/")
	if q == "" {
		return "", "", false
	}
	i := strings.LastIndexByte(q, '/')
	switch {
	case i < 0:
		return ".", p, true
	case i == 0:
		return "/", p[1:], true
	}
	return q[:i], p[i+1:], true
}

// openParents opens the parent dirs of req's two paths (relative to the
// caller's dirfds, oldBase and newBase) and returns them with the last
// names; ok is false when either cannot be, and the call is then left to
// the kernel. The parents are resolved as the kernel would, symlinks
// followed, except magic links: the worker's /proc/self is the guest, not
// the caller. A path through one is left to the kernel.
func openParents(oldBase, newBase int, req renameReq) (opd int, on string, npd int, nn string, ok bool) {
	od, on, ok1 := splitPath(req.oldPath)
	nd, nn, ok2 := splitPath(req.newPath)
	if !ok1 || !ok2 {
		return -1, "", -1, "", false
	}
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_MAGICLINKS}
	opd, err := unix.Openat2(oldBase, od, how)
	if err != nil {
		return -1, "", -1, "", false
	}
	npd, err = unix.Openat2(newBase, nd, how)
	if err != nil {
		unix.Close(opd)
		return -1, "", -1, "", false
	}
	return opd, on, npd, nn, true
}

// rename makes the call with the caller's rights and, where the overlay
// refuses to move a dir, moves it by hand.
func (w *renameWork) rename(oldBase, newBase int, req renameReq) seccomp.Answer {
	opd, on, npd, nn, ok := openParents(oldBase, newBase, req)
	if !ok {
		return contAnswer
	}
	defer unix.Close(opd)
	defer unix.Close(npd)
	err := unix.Renameat2(opd, on, npd, nn, req.flags)
	if err != unix.EXDEV {
		return errAnswer(err)
	}
	// EXDEV: the overlay refused to move a lower dir, or the parents are on
	// two mounts (then it stays EXDEV).
	err = w.emulate(opd, strings.TrimRight(on, "/"), npd, strings.TrimRight(nn, "/"), req.flags)
	if errors.Is(err, errCannot) || errors.Is(err, errGone) {
		return errAnswer(unix.EXDEV)
	}
	return errAnswer(err)
}

func errAnswer(err error) seccomp.Answer {
	if err == nil {
		return seccomp.Answer{}
	}
	var e unix.Errno
	if !errors.As(err, &e) {
		e = unix.EIO
	}
	return seccomp.Answer{Errno: e}
}

// live reports whether the caller still waits and the sandbox goes on.
func (w *renameWork) live() bool { return w.ctx.Err() == nil && w.n.Valid() }

func mntID(dfd int, name string) (uint64, uint16, error) {
	var sx unix.Statx_t
	flags := unix.AT_SYMLINK_NOFOLLOW
	if name == "" {
		flags |= unix.AT_EMPTY_PATH
	}
	if err := unix.Statx(dfd, name, flags, unix.STATX_MNT_ID|unix.STATX_TYPE|unix.STATX_MODE, &sx); err != nil {
		return 0, 0, err
	}
	if sx.Mask&unix.STATX_MNT_ID == 0 {
		return 0, 0, errCannot
	}
	return sx.Mnt_id, sx.Mode, nil
}

// emulate moves dir on (in opd) to nn (in npd) by hand. Every check the
// kernel makes before the file system's rename has passed (the real call
// got as far as the overlay's EXDEV); what the file system would still have
// said is ENOTEMPTY for a target dir that is not empty.
func (w *renameWork) emulate(opd int, on string, npd int, nn string, flags uint) error {
	var fs unix.Statfs_t
	if err := unix.Fstatfs(opd, &fs); err != nil || fs.Type != unix.OVERLAYFS_SUPER_MAGIC {
		return errCannot
	}
	om, _, err := mntID(opd, "")
	if err != nil {
		return errCannot
	}
	nm, _, err := mntID(npd, "")
	if err != nil || nm != om {
		return errCannot
	}
	sm, _, err := mntID(opd, on)
	if err != nil || sm != om {
		return errCannot
	}
	w.mnt = om
	var src unix.Stat_t
	if err := unix.Fstatat(opd, on, &src, unix.AT_SYMLINK_NOFOLLOW); err != nil || src.Mode&unix.S_IFMT != unix.S_IFDIR {
		return errCannot
	}
	replace := false
	var dst unix.Stat_t
	switch err := unix.Fstatat(npd, nn, &dst, unix.AT_SYMLINK_NOFOLLOW); {
	case err == nil:
		if flags&unix.RENAME_NOREPLACE != 0 {
			return unix.EEXIST
		}
		if dst.Mode&unix.S_IFMT != unix.S_IFDIR {
			return unix.ENOTDIR
		}
		if dst.Dev == src.Dev && dst.Ino == src.Ino {
			return nil
		}
		empty, err := dirEmpty(npd, nn)
		if err != nil {
			return errCannot
		}
		if !empty {
			return unix.ENOTEMPTY
		}
		replace = true
	case errors.Is(err, unix.ENOENT):
	default:
		return err
	}
	w.links, w.modes = map[[2]uint64]string{}, map[[2]uint64]uint32{}
	if err := w.check(opd, on, &src, 0); err != nil {
		w.restoreModes(opd, on, 0)
		return err
	}
	if !w.live() {
		w.restoreModes(opd, on, 0)
		return errGone
	}
	w.links = map[[2]uint64]string{}
	if replace {
		if err := unix.Unlinkat(npd, nn, unix.AT_REMOVEDIR); err != nil {
			w.restoreModes(opd, on, 0)
			return err
		}
	}
	w.top = -1
	err = w.move(opd, on, npd, nn, "", &src)
	if w.top >= 0 {
		unix.Close(w.top)
	}
	return err
}

func devIno(st *unix.Stat_t) [2]uint64 { return [2]uint64{st.Dev, st.Ino} }

// dirEmpty reports whether dir name in dfd has no entries.
func dirEmpty(dfd int, name string) (bool, error) {
	names, err := fswalk.ReadNamesAt(dfd, name)
	return len(names) == 0, err
}

// readNames lists dir name in dfd ("" for dfd itself).

// check walks the tree to move before anything moves: every dir must be the
// caller's own, with a group it may give it (so the copy can be made
// exactly), and nothing in it may be a mount point (a mask, a bind) or a
// device node (the overlay could not copy it up). A dir the caller cannot
// list or empty is opened up (u+rwx, as its owner may); restoreModes puts
// the modes back if the move does not happen.
func (w *renameWork) check(pfd int, name string, st *unix.Stat_t, depth int) error {
	if depth > maxRenameDepth || int(st.Uid) != w.creds.fsuid {
		return errCannot
	}
	if !w.creds.inGroup(st.Gid) {
		return errCannot
	}
	if st.Mode&0o700 != 0o700 {
		if err := unix.Fchmodat(pfd, name, (st.Mode&0o7777)|0o700, 0); err != nil {
			return errCannot
		}
		w.modes[devIno(st)] = st.Mode & 0o7777
	}
	fd, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return errCannot
	}
	defer unix.Close(fd)
	var again unix.Stat_t
	if unix.Fstat(fd, &again) != nil || again.Ino != st.Ino || again.Dev != st.Dev {
		return errCannot
	}
	names, err := fswalk.ReadNamesAt(fd, "")
	if err != nil {
		return errCannot
	}
	for _, n := range names {
		m, mode, err := mntID(fd, n)
		if err != nil || m != w.mnt {
			return errCannot
		}
		switch uint32(mode) & unix.S_IFMT {
		case unix.S_IFCHR, unix.S_IFBLK:
			return errCannot
		case unix.S_IFDIR:
			var cst unix.Stat_t
			if unix.Fstatat(fd, n, &cst, unix.AT_SYMLINK_NOFOLLOW) != nil {
				return errCannot
			}
			if err := w.check(fd, n, &cst, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// restoreModes puts back the modes check opened up, beneath name in pfd.
func (w *renameWork) restoreModes(pfd int, name string, depth int) {
	if len(w.modes) == 0 || depth > maxRenameDepth {
		return
	}
	var st unix.Stat_t
	if unix.Fstatat(pfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return
	}
	mode, opened := w.modes[devIno(&st)]
	if fd, err := unix.Openat(pfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0); err == nil {
		names, _ := fswalk.ReadNamesAt(fd, "")
		for _, n := range names {
			w.restoreModes(fd, n, depth+1)
		}
		unix.Close(fd)
	}
	if opened {
		unix.Fchmodat(pfd, name, mode, 0)
	}
}

// move moves dir oname in opd to a new dir nname in npd (rel beneath the
// new top), as the kernel's rename would leave it.
func (w *renameWork) move(opd int, oname string, npd int, nname, rel string, st *unix.Stat_t) error {
	ofd, err := unix.Openat(opd, oname, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(ofd)
	if err := unix.Mkdirat(npd, nname, 0o700); err != nil {
		return err
	}
	nfd, err := unix.Openat(npd, nname, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	if rel == "" {
		w.top = nfd // closed by emulate
	} else {
		defer unix.Close(nfd)
	}
	names, err := fswalk.ReadNamesAt(ofd, "")
	if err != nil {
		return err
	}
	for _, n := range names {
		if !w.live() {
			return errGone
		}
		var cst unix.Stat_t
		if err := unix.Fstatat(ofd, n, &cst, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
		crel := n
		if rel != "" {
			crel = rel + "/" + n
		}
		switch {
		case cst.Mode&unix.S_IFMT == unix.S_IFDIR:
			if err := w.move(ofd, n, nfd, n, crel, &cst); err != nil {
				return err
			}
			continue
		case cst.Mode&unix.S_IFMT == unix.S_IFREG && cst.Nlink > 1:
			// Renamed apart, each name of a host file would be copied up
			// apart: one inode becomes two. The first name is renamed, the
			// others linked to it.
			if first, ok := w.links[devIno(&cst)]; ok {
				if unix.Linkat(w.top, first, nfd, n, 0) == nil {
					if err := unix.Unlinkat(ofd, n, 0); err != nil {
						return err
					}
					continue
				}
			} else {
				w.links[devIno(&cst)] = crel
			}
		}
		if err := unix.Renameat(ofd, n, nfd, n); err != nil {
			return err
		}
	}
	copyXattrs(ofd, nfd)
	mode := st.Mode & 0o7777
	if m, ok := w.modes[devIno(st)]; ok {
		mode = m
	}
	var now unix.Stat_t
	if err := unix.Fstat(nfd, &now); err != nil {
		return err
	}
	if now.Gid != st.Gid {
		if err := unix.Fchown(nfd, -1, int(st.Gid)); err != nil {
			return err
		}
	}
	if err := unix.Fchmod(nfd, mode); err != nil {
		return err
	}
	if err := unix.Unlinkat(opd, oname, unix.AT_REMOVEDIR); err != nil {
		return err
	}
	// Last, once its entries stopped changing: the dir keeps its times.
	ts := [2]unix.Timespec{st.Atim, st.Mtim}
	if _, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(nfd), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0); e != 0 {
		return e
	}
	return nil
}

// copyXattrs copies the xattrs the caller can see (user.*, ACLs) from one
// dir to another; the overlay's own are not listed through it.
func copyXattrs(from, to int) {
	sz, err := unix.Flistxattr(from, nil)
	if err != nil || sz == 0 {
		return
	}
	buf := make([]byte, sz)
	sz, err = unix.Flistxattr(from, buf)
	if err != nil {
		return
	}
	for _, name := range strings.Split(strings.TrimRight(string(buf[:sz]), "\x00"), "\x00") {
		vsz, err := unix.Fgetxattr(from, name, nil)
		if err != nil {
			continue
		}
		v := make([]byte, vsz)
		if vsz, err = unix.Fgetxattr(from, name, v); err == nil {
			unix.Fsetxattr(to, name, v[:vsz], 0)
		}
	}
}
