package guest

import (
	"context"
	"errors"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/containment/seccomp"
	"github.com/dryexec/dryexec/wire"
)

// FIFOs in the VM. QEMU's 9p server makes a FIFO, then opens it with O_PATH
// to set its mode, which Debian's QEMU 7.2 (CVE-2023-2861's fix) refuses
// with ENXIO, and removes the node: mkfifo on the view fails in the VM
// (docs/architecture.md, "The vm rung"). So the command's mknod and mknodat
// of a FIFO are handed to this supervisor (seccomp user notification, which
// the VM's kernel has). It resolves the parent directory as the caller's
// call would (the caller's cwd or dirfd, its root, every link followed by
// this kernel: the one the command sees), and when that directory is on the
// view (9p) asks the host to make the FIFO there (wire.VerbTrialMknod); the
// host makes it through the merged view, resolved again beneath the view's
// root (viewtrial.MknodInView), so that a lying VM still cannot reach
// outside it. A FIFO elsewhere (the VM's own /dev/shm), or any other node,
// continues as the caller made it, which is always safe: nothing here makes
// a node the caller could not have asked QEMU for itself.
type vmFIFOs struct {
	conn *wire.Conn
	// mu guards next and pending: the host's answers to the requests
	// under way, by frame ID.
	mu      sync.Mutex
	next    uint64
	pending map[uint64]chan int
}

// mknodCalls are the calls vmFIFOs handles.
var mknodCalls = []string{"mknod", "mknodat"}

// vmProfile is the seccomp profile of a command in the VM: innerProfile's,
// with mknod and mknodat handed to the supervisor.
func vmProfile() *seccomp.Profile {
	p := innerProfile()
	p.Handle("QEMU's 9p server cannot make a FIFO: the host makes it through the view", mknodCalls...)
	return p
}

func newVMFIFOs(conn *wire.Conn) *vmFIFOs {
	return &vmFIFOs{conn: conn, next: 1 << 32, pending: map[uint64]chan int{}}
}

// answer takes the host's answer to a request (readRun's frames after
// trial.run); other frames are not this one's.
func (v *vmFIFOs) answer(f *wire.Frame) {
	if f.Verb != wire.VerbTrialMknod || (f.Kind != wire.KindResp && f.Kind != wire.KindErr) {
		return
	}
	v.mu.Lock()
	ch := v.pending[f.ID]
	delete(v.pending, f.ID)
	v.mu.Unlock()
	if ch == nil {
		return
	}
	var r wire.TrialMknodResult
	if f.Kind == wire.KindErr || f.Decode(&r) != nil {
		r.Errno = int(unix.EIO)
	}
	ch <- r.Errno
}

// ask sends req to the host and waits for its errno.
func (v *vmFIFOs) ask(req *wire.TrialMknod) unix.Errno {
	ch := make(chan int, 1)
	v.mu.Lock()
	v.next++
	id := v.next
	v.pending[id] = ch
	v.mu.Unlock()
	if err := v.conn.Send(wire.KindReq, wire.VerbTrialMknod, id, req); err != nil {
		v.mu.Lock()
		delete(v.pending, id)
		v.mu.Unlock()
		return unix.EIO
	}
	return unix.Errno(<-ch)
}

// handle answers one notified mknod or mknodat: anything but a FIFO (or a
// path this cannot judge) continues at once; a FIFO is resolved and made on
// a goroutine of its own (slow).
func (v *vmFIFOs) handle(_ context.Context, n *seccomp.Notification) (seccomp.Answer, func() seccomp.Answer) {
	dir, pathArg, modeArg := int32(unix.AT_FDCWD), 0, 1
	if seccomp.Name(n.Nr) == "mknodat" {
		dir, pathArg, modeArg = int32(n.Args[0]), 1, 2
	}
	mode := uint32(n.Args[modeArg])
	if mode&unix.S_IFMT != unix.S_IFIFO {
		return contAnswer, nil
	}
	p, err := readCString(n.PID, n.Args[pathArg])
	if err != nil {
		return contAnswer, nil
	}
	return seccomp.Answer{}, func() seccomp.Answer { return v.make(n, dir, p, mode) }
}

// make resolves the FIFO's parent as the caller would and has the host make
// it there.
func (v *vmFIFOs) make(n *seccomp.Notification, dirfd int32, p string, mode uint32) seccomp.Answer {
	parent, name := ".", p
	if i := strings.LastIndexByte(p, '/'); i >= 0 {
		parent, name = p[:i], p[i+1:]
		if parent == "" {
			parent = "/"
		}
	}
	if name == "" || name == "." || name == ".." {
		// A trailing slash, or a name that always exists: the kernel's
		// own answer, without 9p's mknod.
		return contAnswer
	}
	if len(name) > unix.NAME_MAX {
		return seccomp.Answer{Errno: unix.ENAMETOOLONG}
	}
	proc := "/proc/" + strconv.Itoa(n.PID)
	if dirfd != unix.AT_FDCWD && !strings.HasPrefix(p, "/") {
		if _, err := os.Lstat(proc + "/fd/" + strconv.Itoa(int(dirfd))); err != nil {
			return seccomp.Answer{Errno: unix.EBADF}
		}
	}
	cr, err := readCreds(proc)
	if err != nil {
		return contAnswer
	}
	// Opened as the caller's lookup would go: through its cwd, dirfd or
	// root, every link followed by this kernel (the links the command made
	// or sees in the view resolve in the VM, never on the host).
	fd, err := unix.Open(magicPath(proc, dirfd, parent), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		if !n.Valid() {
			return contAnswer
		}
		var en unix.Errno
		if errors.As(err, &en) {
			return seccomp.Answer{Errno: en}
		}
		return contAnswer
	}
	defer unix.Close(fd)
	var sfs unix.Statfs_t
	if unix.Fstatfs(fd, &sfs) != nil || sfs.Type != unix.V9FS_MAGIC {
		return contAnswer // the VM's own filesystem: its mknod works
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return contAnswer
	}
	where, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil || !strings.HasPrefix(where, "/") {
		return contAnswer
	}
	// What was read of /proc/PID was the caller's only if it still waits.
	if !n.Valid() {
		return contAnswer
	}
	if e := mayCreateIn(&st, cr); e != 0 {
		return seccomp.Answer{Errno: e}
	}
	gid := uint32(cr.fsgid)
	if st.Mode&unix.S_ISGID != 0 {
		gid = st.Gid // a set-group-ID directory gives its group
	}
	req := wire.TrialMknod{Dir: []byte(where), Name: []byte(name),
		Mode: unix.S_IFIFO | mode&0o7777&^cr.umask, UID: uint32(cr.fsuid), GID: gid}
	if e := v.ask(&req); e != 0 {
		return seccomp.Answer{Errno: e}
	}
	return seccomp.Answer{}
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
	case uint32(cr.fsgid) == st.Gid || slices.Contains(cr.groups, int(st.Gid)):
		perm = st.Mode >> 3 & 0o7
	}
	if perm&0o3 != 0o3 {
		return unix.EACCES
	}
	return 0
}
