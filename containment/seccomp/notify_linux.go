package seccomp

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Install sets no_new_privs and installs prog on the calling OS thread only (no
// TSYNC): the caller must have locked its goroutine to the thread
// (runtime.LockOSThread) and never unlock it, so that the thread dies with the
// goroutine. Children the thread forks inherit the filter. With listener, the
// filter gets a user-notification listener, returned as an fd (close-on-exec)
// to be served by Serve on another thread; otherwise it returns -1.
//
// A Go thread under a filter with a listener must never make a refused call
// through a raw system call (syscall.RawSyscall, and Go's own fork, which is
// raw): blocked in the kernel without telling the scheduler, it holds up the
// garbage collector's stop-the-world, which in turn parks the goroutine that
// would answer the notification. Calls through syscall.Syscall are safe.
func Install(prog []unix.SockFilter, listener bool) (int, error) {
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return -1, fmt.Errorf("seccomp: no_new_privs: %w", err)
	}
	fp := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	var flags uintptr
	if listener {
		// WAIT_KILLABLE_RECV (Linux 5.19): once the supervisor has read a
		// notification, only a fatal signal interrupts the caller. A call the
		// supervisor performs (Rule.Handled) must not be restarted by a
		// signal after it took effect: the restarted call would fail where
		// the first one succeeded.
		flags = unix.SECCOMP_FILTER_FLAG_NEW_LISTENER | unix.SECCOMP_FILTER_FLAG_WAIT_KILLABLE_RECV
	}
	fd, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&fp)))
	if errno == unix.EINVAL && listener {
		// An older kernel: handled calls are then interruptible (Handle).
		flags = unix.SECCOMP_FILTER_FLAG_NEW_LISTENER
		fd, _, errno = unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, flags, uintptr(unsafe.Pointer(&fp)))
	}
	if errno != 0 {
		return -1, fmt.Errorf("seccomp: installing the filter: %w", errno)
	}
	if !listener {
		return -1, nil
	}
	return int(fd), nil
}

// notif is struct seccomp_notif.
type notif struct {
	ID    uint64
	PID   uint32
	Flags uint32
	Nr    int32
	Arch  uint32
	IP    uint64
	Args  [6]uint64
}

// notifResp is struct seccomp_notif_resp.
type notifResp struct {
	ID    uint64
	Val   int64
	Error int32
	Flags uint32
}

const ioctlNotifIDValid = 0x40082102 // SECCOMP_IOCTL_NOTIF_ID_VALID

// Call is a notified system call, as the supervisor sees it.
type Call struct {
	PID  int // the calling thread, in the supervisor's pid namespace
	Arch uint32
	Nr   int
	Args [6]uint64
}

// Event is one refused call.
type Event struct {
	Call
	Name   string     // the call's name ("syscall_N" if unknown, "i386:N" for a foreign ABI)
	Detail string     // name and key arguments, e.g. socket(AF_VSOCK, SOCK_STREAM, 0)
	Exe    string     // the caller's executable, as /proc/PID/exe names it
	Errno  unix.Errno // what the caller got
	Why    string     // the rule's reason
}

// Server answers the notifications of one listener.
type Server struct {
	// Profile decides each refused call's errno and reason.
	Profile *Profile
	// Continue, when it returns true, lets a notified call proceed
	// (SECCOMP_USER_NOTIF_FLAG_CONTINUE) instead of refusing it. It is for the
	// supervisor's own thread, which runs under the filter to pass it on to
	// what it starts: only values in registers may be judged (clone's flags),
	// never memory the caller could change after the check. Nil: refuse all.
	Continue func(*Call) bool
	// Report receives every refused call, before the caller is answered (so
	// the caller's exit implies its reports were made). It is called from
	// Serve's goroutine.
	Report func(*Event)
	// Handle answers a call of a Handled rule. It runs on Serve's goroutine
	// and must be quick: it returns the answer, or (with slow set) only
	// decides that slow, run in a goroutine of its own, will (it may take
	// long: other calls are answered meanwhile, and Quiesce waits for it).
	// Nil: such calls proceed (SECCOMP_USER_NOTIF_FLAG_CONTINUE).
	Handle func(ctx context.Context, n *Notification) (a Answer, slow func() Answer)

	// answering is held while one notification is answered (Quiesce).
	answering sync.Mutex
	// handlers counts the Handle calls under way; idle is signalled when it
	// drops to 0.
	mu       sync.Mutex
	handlers int
	idle     *sync.Cond
}

// Notification is a pending call handed to Server.Handle.
type Notification struct {
	Call
	id uint64
	fd int
}

// Valid reports whether the call is still pending: its caller has not died
// (or been interrupted, on a kernel without WAIT_KILLABLE_RECV). What was
// read of /proc/PID before Valid returned true was the caller's, not a
// process that reused its pid.
func (n *Notification) Valid() bool {
	id := n.id
	return ioctl(n.fd, ioctlNotifIDValid, unsafe.Pointer(&id)) == nil
}

// Answer is Handle's answer to a call.
type Answer struct {
	// Continue lets the call run as the caller made it; Val and Errno are
	// then unused.
	Continue bool
	Val      int64      // the call's return value when Errno is 0
	Errno    unix.Errno // what the caller gets, or 0
}

// Quiesce waits until no notification is being answered. Once every process
// under the filter is dead, nothing more can be reported after it returns:
// a caller's reports are made before it is answered, and a caller that died
// unanswered took its pending notification with it. So a trial can take its
// violations at once, without waiting for Serve to see the filter's last
// user go (which costs a few thread wake-ups).
//
// It also waits until every Handle call has answered: a trial walks its
// upper dirs after Quiesce, and a handled call changes them. A handler whose
// caller died stops at its next Valid check.
func (s *Server) Quiesce() {
	s.answering.Lock()
	//lint:ignore SA2001 an empty critical section: waiting for the holder is the point
	s.answering.Unlock()
	s.waitHandlers()
}

func (s *Server) waitHandlers() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.handlers > 0 {
		s.cond().Wait()
	}
}

// cond returns idle, made on first use; s.mu must be held.
func (s *Server) cond() *sync.Cond {
	if s.idle == nil {
		s.idle = sync.NewCond(&s.mu)
	}
	return s.idle
}

// Serve answers notifications on fd until no process uses the filter any more
// (the kernel then reports POLLHUP), or ctx is done. It closes fd.
func (s *Server) Serve(ctx context.Context, fd int) error {
	defer unix.Close(fd)
	// The handlers answer on fd: it stays open until they are done.
	defer s.waitHandlers()
	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return fmt.Errorf("seccomp: eventfd: %w", err)
	}
	defer unix.Close(wake)
	stop := context.AfterFunc(ctx, func() {
		unix.Write(wake, []byte{1, 0, 0, 0, 0, 0, 0, 0})
	})
	defer stop()
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}, {Fd: int32(wake), Events: unix.POLLIN}}
	for {
		fds[0].Revents, fds[1].Revents = 0, 0
		if _, err := unix.Poll(fds, -1); err != nil {
			if err == unix.EINTR {
				continue
			}
			return fmt.Errorf("seccomp: poll: %w", err)
		}
		if fds[1].Revents != 0 {
			return ctx.Err()
		}
		if fds[0].Revents&unix.POLLIN != 0 {
			s.answering.Lock()
			err := s.answer(ctx, fd)
			s.answering.Unlock()
			if err != nil {
				return err
			}
			continue
		}
		if fds[0].Revents&(unix.POLLHUP|unix.POLLERR) != 0 {
			return nil
		}
	}
}

func (s *Server) answer(ctx context.Context, fd int) error {
	var n notif // the kernel wants it zeroed
	if err := ioctl(fd, unix.SECCOMP_IOCTL_NOTIF_RECV, unsafe.Pointer(&n)); err != nil {
		if err == unix.EINTR || err == unix.ENOENT {
			return nil // the caller died before we read it
		}
		return fmt.Errorf("seccomp: receiving a notification: %w", err)
	}
	c := &Call{PID: int(n.PID), Arch: n.Arch, Nr: int(n.Nr), Args: n.Args}
	resp := notifResp{ID: n.ID}
	if c.Arch == nativeArch && (x32Bit == 0 || c.Nr&x32Bit == 0) {
		if r := s.Profile.Lookup(c.Nr, c.Args); r != nil && r.Handled {
			if s.Handle == nil {
				resp.Flags = unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE
				return send(fd, &resp)
			}
			a, slow := s.Handle(ctx, &Notification{Call: *c, id: n.ID, fd: fd})
			if slow == nil {
				return send(fd, a.resp(n.ID))
			}
			s.mu.Lock()
			s.handlers++
			s.mu.Unlock()
			go s.handle(fd, n.ID, slow)
			return nil
		}
	}
	if s.Continue != nil && s.Continue(c) {
		resp.Flags = unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE
	} else {
		ev := s.describe(c)
		// The pid is only trustworthy while the call is pending: check that
		// the notification is still live after reading /proc/PID.
		if ioctl(fd, ioctlNotifIDValid, unsafe.Pointer(&n.ID)) != nil {
			return nil
		}
		resp.Error = -int32(ev.Errno)
		if s.Report != nil {
			s.Report(ev)
		}
	}
	return send(fd, &resp)
}

// handle runs a slow Handle answer and sends it.
func (s *Server) handle(fd int, id uint64, slow func() Answer) {
	defer func() {
		s.mu.Lock()
		s.handlers--
		if s.handlers == 0 {
			s.cond().Broadcast()
		}
		s.mu.Unlock()
	}()
	send(fd, slow().resp(id)) // ENOENT: the caller died meanwhile; nothing else can fail here
}

func (a Answer) resp(id uint64) *notifResp {
	resp := &notifResp{ID: id}
	switch {
	case a.Continue:
		resp.Flags = unix.SECCOMP_USER_NOTIF_FLAG_CONTINUE
	case a.Errno != 0:
		resp.Error = -int32(a.Errno)
	default:
		resp.Val = a.Val
	}
	return resp
}

func send(fd int, resp *notifResp) error {
	if err := ioctl(fd, unix.SECCOMP_IOCTL_NOTIF_SEND, unsafe.Pointer(resp)); err != nil && err != unix.ENOENT {
		return fmt.Errorf("seccomp: answering a notification: %w", err)
	}
	return nil
}

func ioctl(fd int, req uint, arg unsafe.Pointer) error {
	_, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uintptr(req), uintptr(arg))
	if e != 0 {
		return e
	}
	return nil
}

// describe names a refused call and its key arguments.
func (s *Server) describe(c *Call) *Event {
	ev := &Event{Call: *c, Errno: unix.ENOSYS}
	ev.Exe, _ = os.Readlink("/proc/" + strconv.Itoa(c.PID) + "/exe")
	switch {
	case c.Arch != nativeArch:
		ev.Name = archName(c.Arch) + ":" + strconv.Itoa(c.Nr)
		ev.Detail = fmt.Sprintf("system call %d of the %s ABI", c.Nr, archName(c.Arch))
		ev.Why = "foreign system-call ABI"
		return ev
	case x32Bit != 0 && c.Nr&x32Bit != 0:
		ev.Name = "x32:" + strconv.Itoa(c.Nr&^x32Bit)
		ev.Detail = fmt.Sprintf("system call %d of the x32 ABI", c.Nr&^x32Bit)
		ev.Why = "foreign system-call ABI"
		return ev
	}
	ev.Name = Name(c.Nr)
	r := s.Profile.Lookup(c.Nr, c.Args)
	if r == nil {
		// Not a listed call: above maxKnown.
		ev.Detail = fmt.Sprintf("%s (newer than this filter knows)", ev.Name)
		ev.Why = "unknown system call"
		return ev
	}
	ev.Errno, ev.Why = r.Errno, r.Why
	ev.Detail = detail(ev.Name, c)
	return ev
}

func archName(a uint32) string {
	switch a {
	case unix.AUDIT_ARCH_I386:
		return "i386"
	case unix.AUDIT_ARCH_X86_64:
		return "x86_64"
	case unix.AUDIT_ARCH_AARCH64:
		return "aarch64"
	case unix.AUDIT_ARCH_ARM:
		return "arm"
	}
	return fmt.Sprintf("arch_%#x", a)
}

func familyName(f uint64) string {
	switch f {
	case unix.AF_INET:
		return "AF_INET"
	case unix.AF_INET6:
		return "AF_INET6"
	case unix.AF_PACKET:
		return "AF_PACKET"
	case unix.AF_VSOCK:
		return "AF_VSOCK"
	}
	return strconv.FormatUint(f, 10)
}

func detail(name string, c *Call) string {
	a := c.Args
	switch name {
	case "socket":
		fam := familyName(a[0] & 0xffffffff)
		typ := strconv.FormatUint(a[1]&0xf, 10)
		switch a[1] & 0xf {
		case unix.SOCK_STREAM:
			typ = "SOCK_STREAM"
		case unix.SOCK_DGRAM:
			typ = "SOCK_DGRAM"
		case unix.SOCK_RAW:
			typ = "SOCK_RAW"
		}
		return fmt.Sprintf("socket(%s, %s, %d)", fam, typ, int32(a[2]))
	case "clone", "unshare":
		return fmt.Sprintf("%s(%s)", name, nsFlagNames(a[0]))
	case "ioctl":
		req := fmt.Sprintf("%#x", uint32(a[1]))
		switch uint32(a[1]) {
		case unix.TIOCSTI:
			req = "TIOCSTI"
		case unix.TIOCLINUX:
			req = "TIOCLINUX"
		}
		return fmt.Sprintf("ioctl(%d, %s)", int32(a[0]), req)
	case "ptrace":
		req := strconv.FormatUint(a[0], 10)
		switch a[0] {
		case unix.PTRACE_ATTACH:
			req = "PTRACE_ATTACH"
		case unix.PTRACE_SEIZE:
			req = "PTRACE_SEIZE"
		}
		return fmt.Sprintf("ptrace(%s, %d)", req, int32(a[1]))
	case "personality":
		return fmt.Sprintf("personality(%#x)", uint32(a[0]))
	case "mount":
		return fmt.Sprintf("mount(%s, %s, %s)", str(c, a[0]), str(c, a[1]), str(c, a[2]))
	case "umount2", "umount", "chroot", "swapon", "swapoff", "acct", "fsopen":
		return fmt.Sprintf("%s(%s)", name, str(c, a[0]))
	case "pivot_root":
		return fmt.Sprintf("pivot_root(%s, %s)", str(c, a[0]), str(c, a[1]))
	case "setns":
		return fmt.Sprintf("setns(%d, %s)", int32(a[0]), nsFlagNames(a[1]))
	}
	return fmt.Sprintf("%s(%#x, %#x, %#x)", name, a[0], a[1], a[2])
}

func nsFlagNames(f uint64) string {
	nsNames := []struct {
		bit  uint64
		name string
	}{{unix.CLONE_NEWUSER, "CLONE_NEWUSER"}, {unix.CLONE_NEWNS, "CLONE_NEWNS"}, {unix.CLONE_NEWPID, "CLONE_NEWPID"},
		{unix.CLONE_NEWNET, "CLONE_NEWNET"}, {unix.CLONE_NEWIPC, "CLONE_NEWIPC"}, {unix.CLONE_NEWUTS, "CLONE_NEWUTS"},
		{unix.CLONE_NEWCGROUP, "CLONE_NEWCGROUP"}, {unix.CLONE_NEWTIME, "CLONE_NEWTIME"}}
	var parts []string
	for _, n := range nsNames {
		if f&n.bit != 0 {
			parts = append(parts, n.name)
		}
	}
	if len(parts) == 0 {
		return fmt.Sprintf("%#x", f)
	}
	return fmt.Sprintf("%#x: %s", f, strings.Join(parts, "|"))
}

// maxStr bounds a string argument read from the caller's memory.
const maxStr = 256

// str reads a NUL-terminated string argument from the caller's memory, for
// the report only (the call is refused whatever it says).
func str(c *Call, addr uint64) string {
	if addr == 0 {
		return "NULL"
	}
	f, err := os.Open("/proc/" + strconv.Itoa(c.PID) + "/mem")
	if err != nil {
		return fmt.Sprintf("%#x", addr)
	}
	defer f.Close()
	// Stay within the page: a read that crosses into an unmapped one fails whole.
	size := min(maxStr, 4096-int(addr%4096))
	buf := make([]byte, size)
	n, _ := f.ReadAt(buf, int64(addr))
	if n <= 0 {
		return fmt.Sprintf("%#x", addr)
	}
	b := buf[:n]
	if i := strings.IndexByte(string(b), 0); i >= 0 {
		return strconv.Quote(string(b[:i]))
	}
	return strconv.Quote(string(b)) + "…"
}
