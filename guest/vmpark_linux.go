package guest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/wire"
)

// vmPark is what a vm session guest keeps to park and unpark: the VM's
// initramfs root (where the guest goes while the view is unmounted) and
// the workspace's tmpfs, which lives in the VM's RAM and so in its saved
// state.
type vmPark struct {
	initRoot int // O_PATH of the initramfs's root, taken before the view
	// ws is, while parked, a detached copy of the workspace's mount
	// (open_tree): the mount goes with the view's, and a bind from the
	// tmpfs's descriptor would not do (its mount is detached: the kernel
	// binds only from mounts of its namespace).
	ws     int
	parked bool
	// oom counts the VM kernel's OOM kills between execs' reports.
	oom *vmOOM
	// image: the root is the VM's own overlay over the host's image drive
	// (mountVMImage), not the 9p view.
	image bool
	// alive stops the heartbeat (vmHeartbeat) while it runs; nil while
	// parked: the VM is about to be saved, and a heartbeat in flight then
	// would be cut in the middle of its frame.
	alive func()
	// vsock: the wire runs over vsock streams (a VM on Firecracker), which
	// a Firecracker snapshot resets; this guest does not connect them again
	// after a restore, so such a session refuses to park (parkVM).
	vsock bool
}

// errParkVsock refuses a park whose resume would find the wire's streams
// reset: the session goes on as it was instead of being lost at resume.
var errParkVsock = errors.New("this session's wire runs over vsock, whose streams a Firecracker snapshot resets, and the guest does not reconnect them after a restore: parking would lose the session, so it is refused")

// onVsock says whether fd is a vsock socket.
func onVsock(fd int) bool {
	dom, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_DOMAIN)
	return err == nil && dom == unix.AF_VSOCK
}

// parkVM unmounts the view (9p) and every mount above it, and puts the
// guest's root back on the initramfs, so that nothing in the VM refers to
// QEMU's 9p export: QEMU blocks migration while its root fid is attached,
// and drops the blocker when the client clunks it, which the kernel does
// when the 9p superblock goes. The workspace's tmpfs stays (held by
// layers); /dev/shm and /dev/pts are the VM's and go with the view's mounts.
// Between execs nothing of the command runs (every exec's process group
// ends with it), and the pre-started runner was dropped by the caller.
func (s *session) parkVM() error {
	p := s.vm
	if p == nil && s.cfg.Rung == "gvisor" {
		// gVisor's checkpoint saves the sandbox whole (its kernel, the
		// workspace's tmpfs, every process) and runs on: nothing to let go.
		return nil
	}
	if p == nil {
		return fmt.Errorf("this session cannot be parked (rung %s)", s.cfg.Rung)
	}
	if p.parked {
		return fmt.Errorf("already parked")
	}
	if p.vsock {
		return errParkVsock
	}
	if p.image {
		// The root is the VM's own overlay over its drives, no 9p: the
		// VM's state holds it whole (the host attaches the same erofs
		// drive to the restored VM), nothing to let go but the heartbeat.
		p.parked = true
		if p.alive != nil {
			p.alive()
			p.alive = nil
		}
		return nil
	}
	// A process the command left running (a daemon, `sleep &` with
	// nohup) holds files of the view — its executable at least — so the
	// 9p superblock would outlive the detach below: QEMU would refuse the
	// migration, and the view could not be mounted again (the virtio
	// channel stays in use). Refused before anything changes, so the
	// session goes on as it was.
	if others := sessionProcesses(); len(others) > 0 {
		return fmt.Errorf("a process the session started still runs (%s): parking and forking a vm session need every process of its commands ended", strings.Join(others, ", "))
	}
	ws, err := unix.OpenTree(unix.AT_FDCWD, s.ws, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
	if err != nil {
		return fmt.Errorf("keeping the workspace's mount: %w", err)
	}
	// Detached, not unmounted: the guest's own root and cwd are in it
	// until the chroot below, and a detached tree goes with the last
	// reference to it.
	if err := unix.Unmount("/", unix.MNT_DETACH); err != nil {
		unix.Close(ws)
		return fmt.Errorf("detaching the view: %w", err)
	}
	p.ws = ws
	if err := unix.Fchdir(p.initRoot); err != nil {
		return fmt.Errorf("leaving the view: %w", err)
	}
	if err := unix.Chroot("."); err != nil {
		return fmt.Errorf("leaving the view: %w", err)
	}
	p.parked = true
	if p.alive != nil {
		p.alive()
		p.alive = nil
	}
	return nil
}

// unparkVM mounts the view the (new) QEMU exports, as at the session's
// start, and binds the workspace's tmpfs at the workspace again.
func (s *session) unparkVM(wallNS int64) error {
	p := s.vm
	if p == nil && s.cfg.Rung == "gvisor" {
		// A restored gVisor kernel takes the host's clock itself.
		return nil
	}
	if p == nil || !p.parked {
		return fmt.Errorf("not parked")
	}
	if err := setWallClock(wallNS); err != nil {
		return err
	}
	if p.image {
		p.parked = false
		p.alive = s.vmHeartbeat()
		return nil
	}
	if _, err := enterVMRoot(&wire.TrialStart{}, 0); err != nil {
		return err
	}
	if err := os.MkdirAll(s.ws, 0o755); err != nil {
		return fmt.Errorf("creating the workspace mount point: %w", err)
	}
	if err := unix.MoveMount(p.ws, "", unix.AT_FDCWD, s.ws, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("mounting the workspace: %w", err)
	}
	unix.Close(p.ws)
	p.parked = false
	p.alive = s.vmHeartbeat()
	return nil
}

// branchVM makes this restored VM a fork's branch: the parent's baseline
// becomes its origin (renamed beside it on the workspace's tmpfs: nothing
// copied) and the workspace as it is its baseline.
func (s *session) branchVM() error {
	st, ok := s.st.(*scanStaging)
	if !ok {
		return fmt.Errorf("the %s staging cannot branch", s.st.name())
	}
	origin := filepath.Join(filepath.Dir(st.base), "origin")
	// A branch of a branch: its own origin goes, the parent's baseline
	// takes its place.
	if err := os.RemoveAll(origin); err != nil {
		return err
	}
	if err := os.Rename(st.base, origin); err != nil {
		return fmt.Errorf("keeping the origin: %w", err)
	}
	if err := os.Mkdir(st.base, 0o755); err != nil {
		return err
	}
	// The staging holds its baseline by a root opened on the old dir, the
	// origin now: it is opened again on the new one, or the rebase below
	// would copy the workspace over the origin and leave the baseline empty.
	base, err := os.OpenRoot(st.base)
	if err != nil {
		return err
	}
	st.baseR.Close()
	st.baseR, st.origin = base, origin
	return st.rebase()
}

// sessionProcesses lists ("pid N: comm") the live processes of the
// session's pid namespace but its guest (pid 1 there): what the command
// left running. Zombies hold nothing and are left out.
func sessionProcesses() []string {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []string
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == 1 {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue // gone meanwhile
		}
		st := string(b)
		open, shut := strings.IndexByte(st, '('), strings.LastIndexByte(st, ')')
		if open < 0 || shut < open || shut+2 >= len(st) {
			continue
		}
		if state := st[shut+2]; state == 'Z' || state == 'X' {
			continue
		}
		out = append(out, fmt.Sprintf("pid %d: %s", pid, st[open+1:shut]))
	}
	return out
}
