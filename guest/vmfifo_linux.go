package guest

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/containment/seccomp"
	"github.com/dryexec/dryexec/wire"
)

// FIFOs in the VM. QEMU's 9p server makes a FIFO, then opens it with O_PATH
// to set its mode, which Debian's QEMU 7.2 (CVE-2023-2861's fix) refuses
// with ENXIO, and removes the node: mkfifo on the view fails in the VM
// (docs/architecture.md, "The vm rung"), and its chmod of a FIFO fails the
// same way. So the command's mknod of a FIFO and chmod calls are handed to
// this supervisor (seccomp user notification, which
// the VM's kernel has). It resolves the parent directory as the caller's
// call would (the caller's cwd or dirfd, its root, every link followed by
// this kernel: the one the command sees), and when that directory is on the
// view (9p) asks the host to make the FIFO there (wire.VerbTrialNode); the
// host makes it through the merged view, resolved again beneath the view's
// root (viewtrial.NodeInView), so that a lying VM still cannot reach
// outside it. A FIFO elsewhere (the VM's own /dev/shm), or any other node,
// continues as the caller made it, which is always safe: nothing here makes
// a node the caller could not have asked QEMU for itself.
type vmFIFOs struct {
	conn *wire.Conn
	// viewDev is the device of the view's 9p mount, the VM's root: what
	// statfs would not tell (9p2000.L passes on the host's own).
	viewDev uint64
	// mu guards next and pending: the host's answers to the requests
	// under way, by frame ID.
	mu      sync.Mutex
	next    uint64
	pending map[uint64]chan int
}

// nodeCalls are the calls vmFIFOs handles: those that make a node, and
// those that change a mode (9p's chmod of a FIFO fails the same way).
var nodeCalls = []string{"mknod", "mknodat", "chmod", "fchmod", "fchmodat", "fchmodat2"}

// vmProfile is the seccomp profile of a command in the VM: innerProfile's,
// with nodeCalls handed to the supervisor.
func vmProfile() *seccomp.Profile {
	p := innerProfile()
	p.Handle("QEMU's 9p server can neither make a FIFO nor chmod one: the host does it through the view", nodeCalls...)
	p.Handle("the VM's 9p client keeps whole seconds of the times a command sets: the host sets them through the view", "utimensat")
	return p
}

// newVMFIFOs serves the requests on conn, once the view is the root.
func newVMFIFOs(conn *wire.Conn) (*vmFIFOs, error) {
	var st unix.Stat_t
	if err := unix.Stat("/", &st); err != nil {
		return nil, err
	}
	return &vmFIFOs{conn: conn, viewDev: st.Dev, next: 1 << 32, pending: map[uint64]chan int{}}, nil
}

// answer takes the host's answer to a request (readRun's frames after
// trial.run); other frames are not this one's.
func (v *vmFIFOs) answer(f *wire.Frame) {
	if f.Verb != wire.VerbTrialNode || (f.Kind != wire.KindResp && f.Kind != wire.KindErr) {
		return
	}
	v.mu.Lock()
	ch := v.pending[f.ID]
	delete(v.pending, f.ID)
	v.mu.Unlock()
	if ch == nil {
		return
	}
	var r wire.TrialNodeResult
	if f.Kind == wire.KindErr || f.Decode(&r) != nil {
		r.Errno = int(unix.EIO)
	}
	ch <- r.Errno
}

// ask sends req to the host and waits for its errno.
func (v *vmFIFOs) ask(req *wire.TrialNode) unix.Errno {
	ch := make(chan int, 1)
	v.mu.Lock()
	v.next++
	id := v.next
	v.pending[id] = ch
	v.mu.Unlock()
	if err := v.conn.Send(wire.KindReq, wire.VerbTrialNode, id, req); err != nil {
		v.mu.Lock()
		delete(v.pending, id)
		v.mu.Unlock()
		return unix.EIO
	}
	return unix.Errno(<-ch)
}

// handle answers one notified call: anything but a FIFO on the view (or a
// call this cannot judge) continues at once; a FIFO is made or chmodded by
// the host, waited for on a goroutine of its own (slow).
func (v *vmFIFOs) handle(_ context.Context, n *seccomp.Notification) (seccomp.Answer, func() seccomp.Answer) {
	call := seccomp.Name(n.Nr)
	if call == "utimensat" {
		return v.utimensat(n)
	}
	dirfd, pathArg, modeArg := int32(unix.AT_FDCWD), 0, 1
	switch call {
	case "mknodat", "fchmodat", "fchmodat2":
		dirfd, pathArg, modeArg = int32(n.Args[0]), 1, 2
	case "fchmod":
		dirfd, pathArg = int32(n.Args[0]), -1
	}
	mode := uint32(n.Args[modeArg])
	if (call == "mknod" || call == "mknodat") && mode&unix.S_IFMT != unix.S_IFIFO {
		return contAnswer, nil
	}
	p := ""
	if pathArg >= 0 {
		var err error
		if p, err = readCString(n.PID, n.Args[pathArg]); err != nil {
			return contAnswer, nil
		}
	}
	proc := "/proc/" + strconv.Itoa(n.PID)
	p = callerProc(p, n.PID)
	if call == "mknod" || call == "mknodat" {
		return seccomp.Answer{}, func() seccomp.Answer { return v.mknod(n, proc, dirfd, p, mode) }
	}
	// A chmod: only a FIFO on the view needs the host. The look is this
	// supervisor's own and decides nothing but whether to look closer.
	target, flags := magicPath(proc, dirfd, p), unix.O_PATH|unix.O_CLOEXEC
	switch {
	case pathArg < 0, p == "" && call == "fchmodat2" && n.Args[3]&unix.AT_EMPTY_PATH != 0:
		target = proc + "/fd/" + strconv.Itoa(int(dirfd))
	case call == "fchmodat2" && n.Args[3]&unix.AT_SYMLINK_NOFOLLOW != 0:
		flags |= unix.O_NOFOLLOW
	}
	fd, st, ok := v.onView(target, flags)
	if !ok || st.Mode&unix.S_IFMT != unix.S_IFIFO {
		if ok {
			unix.Close(fd)
		}
		return contAnswer, nil
	}
	return seccomp.Answer{}, func() seccomp.Answer {
		defer unix.Close(fd)
		return v.chmod(n, proc, fd, &st, mode)
	}
}

// callerProc is p with the caller's own /proc/self and /proc/thread-self
// named by its thread id: this supervisor's lookup of them would find its
// own. glibc's lchmod (mkfifo -m, tar) chmods "/proc/self/fd/N".
func callerProc(p string, tid int) string {
	id := strconv.Itoa(tid)
	for _, self := range []struct{ link, is string }{{"/proc/self", "/proc/" + id}, {"/proc/thread-self", "/proc/" + id + "/task/" + id}} {
		if p == self.link || strings.HasPrefix(p, self.link+"/") {
			return self.is + p[len(self.link):]
		}
	}
	return p
}

// onView opens target (O_PATH, with flags) and returns it with its stat if
// it is on the view (the 9p mount); ok false otherwise, or if it cannot be
// opened (the caller's own call then fails as it would natively).
func (v *vmFIFOs) onView(target string, flags int) (fd int, st unix.Stat_t, ok bool) {
	fd, err := unix.Open(target, flags, 0)
	if err != nil {
		return -1, st, false
	}
	if unix.Fstat(fd, &st) != nil || st.Dev != v.viewDev {
		unix.Close(fd)
		return -1, st, false
	}
	return fd, st, true
}

// viewPath is where fd is in the view, as this kernel names it.
func viewPath(fd int) (string, bool) {
	p, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	return p, err == nil && strings.HasPrefix(p, "/")
}

// chmod has the host set the mode of the FIFO fd (st) to mode, if the
// caller (still waiting) may.
func (v *vmFIFOs) chmod(n *seccomp.Notification, proc string, fd int, st *unix.Stat_t, mode uint32) seccomp.Answer {
	where, ok := viewPath(fd)
	cr, err := readCreds(proc)
	if !ok || err != nil || !n.Valid() {
		return contAnswer
	}
	if uint32(cr.fsuid) != st.Uid && cr.capEff&(1<<unix.CAP_FOWNER) == 0 {
		return seccomp.Answer{Errno: unix.EPERM}
	}
	mode &= 0o7777
	if !cr.inGroup(st.Gid) && cr.capEff&(1<<unix.CAP_FSETID) == 0 {
		mode &^= unix.S_ISGID // as chmod(2) clears it
	}
	dir, name := splitView(where)
	return v.do(&wire.TrialNode{Op: wire.NodeChmod, Dir: []byte(dir), Name: []byte(name), Mode: mode})
}

// splitView splits where, an absolute path in the view (viewPath), into
// its directory and last name, as wire.TrialNode carries them.
func splitView(where string) (dir, name string) {
	i := strings.LastIndexByte(where, '/')
	if dir = where[:i]; dir == "" {
		dir = "/"
	}
	return dir, where[i+1:]
}

// do asks the host to do req and answers the call with its errno.
func (v *vmFIFOs) do(req *wire.TrialNode) seccomp.Answer {
	if e := v.ask(req); e != 0 {
		return seccomp.Answer{Errno: e}
	}
	return seccomp.Answer{}
}

// mknod resolves the FIFO's parent as the caller would and has the host make
// it there.
func (v *vmFIFOs) mknod(n *seccomp.Notification, proc string, dirfd int32, p string, mode uint32) seccomp.Answer {
	parent, name := ".", p
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		parent, name = p[:i], p[i+1:]
		if parent == "" {
			parent = "/"
		}
	}
	if name == "" || name == "." || name == ".." || len(name) > unix.NAME_MAX {
		// A trailing slash, a name that always exists, one too long:
		// the kernel's own answer, without 9p's mknod.
		return contAnswer
	}
	// Opened as the caller's lookup would go: through its cwd, dirfd or
	// root, every link followed by this kernel (the links the command made
	// or sees in the view resolve in the VM, never on the host). Not on
	// the view (the VM's own /dev/shm): the VM's mknod works there.
	fd, st, ok := v.onView(magicPath(proc, dirfd, parent), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC)
	if !ok {
		return contAnswer
	}
	defer unix.Close(fd)
	where, ok := viewPath(fd)
	cr, err := readCreds(proc)
	// What was read of /proc/PID was the caller's only if it still waits.
	if !ok || err != nil || !n.Valid() {
		return contAnswer
	}
	if e := mayCreateIn(&st, cr); e != 0 {
		return seccomp.Answer{Errno: e}
	}
	mode, gid := newFIFOMode(&st, cr, mode)
	return v.do(&wire.TrialNode{Op: wire.NodeMknod, Dir: []byte(where), Name: []byte(name),
		Mode: unix.S_IFIFO | mode, UID: uint32(cr.fsuid), GID: gid})
}

// newFIFOMode is the permission bits and group the kernel gives a FIFO
// that a caller with cr makes with mode in dir (st), as its mknod(2) would
// on ns (vfs_prepare_mode): the caller's umask taken out; in a
// set-group-ID directory, the directory's group, and no set-group-ID bit
// unless the caller is in that group or may override it (CAP_FSETID) —
// the host, which makes the FIFO, may set any bit.
func newFIFOMode(dir *unix.Stat_t, cr *callerCreds, mode uint32) (perm, gid uint32) {
	perm, gid = mode&0o7777&^cr.umask, uint32(cr.fsgid)
	if dir.Mode&unix.S_ISGID != 0 {
		gid = dir.Gid
		if !cr.inGroup(dir.Gid) && cr.capEff&(1<<unix.CAP_FSETID) == 0 {
			perm &^= unix.S_ISGID
		}
	}
	return perm, gid
}

// mayCreateIn is the errno the kernel would give a caller with cr for
// making an entry in dir (st): EACCES without write and search permission,
// unless it may override that (CAP_DAC_OVERRIDE).
func mayCreateIn(st *unix.Stat_t, cr *callerCreds) unix.Errno {
	if cr.capEff&(1<<unix.CAP_DAC_OVERRIDE) != 0 {
		return 0
	}
	perm := st.Mode & 0o7
	switch {
	case uint32(cr.fsuid) == st.Uid:
		perm = st.Mode >> 6 & 0o7
	case cr.inGroup(st.Gid):
		perm = st.Mode >> 3 & 0o7
	}
	if perm&0o3 != 0o3 {
		return unix.EACCES
	}
	return 0
}

// utimensat has the host set the times a command gives an entry on the
// view. The VM's kernel truncates them to whole seconds before its 9p
// client sends them: v9fs never sets its superblock's time granularity, so
// it keeps the default of one second, and notify_change truncates given
// times to it (cp -p, cp -a, touch -d, rsync -t, tar x would keep only
// seconds). The current time (times NULL, UTIME_NOW) is the host's own, to
// the nanosecond; whole seconds, bad times or flags, anything not on the
// view or that cannot be judged continue as the caller made them.
func (v *vmFIFOs) utimensat(n *seccomp.Notification) (seccomp.Answer, func() seccomp.Answer) {
	dirfd, pathAddr, flags := int32(n.Args[0]), n.Args[1], n.Args[3]
	if n.Args[2] == 0 || flags&^uint64(unix.AT_SYMLINK_NOFOLLOW|unix.AT_EMPTY_PATH) != 0 {
		return contAnswer, nil
	}
	ts, ok := readTimes(n.PID, n.Args[2])
	if !ok {
		return contAnswer, nil
	}
	proc := "/proc/" + strconv.Itoa(n.PID)
	// The entry as the caller's call resolves it: its path (the last link
	// kept with AT_SYMLINK_NOFOLLOW), else its descriptor (futimens).
	target, oflags := proc+"/fd/"+strconv.Itoa(int(dirfd)), unix.O_PATH|unix.O_CLOEXEC
	if pathAddr != 0 {
		p, err := readCString(n.PID, pathAddr)
		if err != nil {
			return contAnswer, nil
		}
		switch {
		case p != "":
			target = magicPath(proc, dirfd, callerProc(p, n.PID))
			if flags&unix.AT_SYMLINK_NOFOLLOW != 0 {
				oflags |= unix.O_NOFOLLOW
			}
		case flags&unix.AT_EMPTY_PATH == 0:
			return contAnswer, nil
		case dirfd == unix.AT_FDCWD:
			target = proc + "/cwd"
		}
	} else if dirfd == unix.AT_FDCWD {
		return contAnswer, nil
	}
	fd, st, ok := v.onView(target, oflags)
	if !ok {
		return contAnswer, nil
	}
	return seccomp.Answer{}, func() seccomp.Answer {
		defer unix.Close(fd)
		where, ok := viewPath(fd)
		cr, err := readCreds(proc)
		if !ok || where == "/" || err != nil || !n.Valid() {
			return contAnswer
		}
		// Given times: the owner's, or CAP_FOWNER's (utimensat(2)).
		if uint32(cr.fsuid) != st.Uid && cr.capEff&(1<<unix.CAP_FOWNER) == 0 {
			return seccomp.Answer{Errno: unix.EPERM}
		}
		dir, name := splitView(where)
		return v.do(&wire.TrialNode{Op: wire.NodeUtimes, Dir: []byte(dir), Name: []byte(name), Times: ts})
	}
}

// readTimes reads utimensat's two timespecs from the caller's memory; ok
// only when one of them has a fraction of a second to keep and both are
// valid (the kernel answers the rest itself).
func readTimes(pid int, addr uint64) (ts [4]int64, ok bool) {
	var raw [2]unix.Timespec
	local := []unix.Iovec{{Base: (*byte)(unsafe.Pointer(&raw[0]))}}
	local[0].SetLen(int(unsafe.Sizeof(raw)))
	remote := []unix.RemoteIovec{{Base: uintptr(addr), Len: int(unsafe.Sizeof(raw))}}
	if n, err := unix.ProcessVMReadv(pid, local, remote, 0); err != nil || n != int(unsafe.Sizeof(raw)) {
		return ts, false
	}
	for i, t := range raw {
		switch {
		case t.Nsec == unix.UTIME_NOW || t.Nsec == unix.UTIME_OMIT:
		case t.Nsec < 0 || t.Nsec >= 1e9:
			return ts, false
		case t.Nsec != 0:
			ok = true
		}
		ts[2*i], ts[2*i+1] = t.Sec, t.Nsec
	}
	return ts, ok
}
