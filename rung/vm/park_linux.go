package vm

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/durable"
	"github.com/dryexec/dryexec/wire"
)

// The view guest's (and QEMU's) descriptors of the monitor's socket and of
// a saved state to restore (Firecracker's: its state file, then its
// memory file), after netsim's frame socket.
func qmpFD() int      { return netFD() + 1 }
func incomingFD() int { return netFD() + 2 }

// savedVM is a parked VM to restore, its files open (Rung.Resume).
type savedVM struct {
	// vmm is the VMM that saved it, the only one that can restore it.
	vmm string
	// files: QEMU's saved state (ParkFile), or Firecracker's state and
	// memory files (FCStateFile, FCMemFile).
	files []*os.File
}

// parkFiles gives a session's VM on QEMU its monitor (a socketpair: t.qmp
// is the host's end) and, when it is restored, the saved state's files
// (t.saved) as the view guest's descriptors qmpFD and from incomingFD on;
// it returns what the host closes once the view guest has started. A
// trial's VM has neither; Firecracker has no monitor but its API.
func (t *trial) parkFiles() ([]*os.File, error) {
	if !t.session {
		return nil, nil
	}
	var closeAfter []*os.File
	if t.fc == nil {
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return nil, fmt.Errorf("socketpair: %w", err)
		}
		t.qmp = os.NewFile(uintptr(fds[0]), "qmp")
		vmm := os.NewFile(uintptr(fds[1]), "qmp-vmm")
		t.extraFile(qmpFD(), vmm)
		closeAfter = append(closeAfter, vmm)
	}
	if t.saved != nil {
		for i, f := range t.saved.files {
			t.extraFile(incomingFD()+i, f)
		}
		closeAfter = append(closeAfter, t.saved.files...)
		t.saved.files = nil
	}
	return closeAfter, nil
}

// extraFile makes f the view guest's descriptor fd.
func (t *trial) extraFile(fd int, f *os.File) {
	for len(t.Cmd.ExtraFiles) <= fd-3 {
		t.Cmd.ExtraFiles = append(t.Cmd.ExtraFiles, nil)
	}
	t.Cmd.ExtraFiles[fd-3] = f
}

// parkArgs adds the monitor and the restore to a session VM's command
// line, and their descriptors to those the view guest keeps for QEMU.
func (t *trial) parkArgs(cfg *vmConfig, keep []int) []int {
	if !t.session {
		return keep
	}
	cfg.qmpFD = qmpFD()
	keep = append(keep, cfg.qmpFD)
	if t.saved != nil {
		cfg.incomingFD = incomingFD()
		keep = append(keep, cfg.incomingFD)
	}
	return keep
}

// ParkFile is the name of a parked VM's saved state in its park dir.
const ParkFile = "vm.state"

// Snapshot saves the VM's whole state to dir/ParkFile, as Park does, and
// lets the VM run on: the state is what a fork with memory restores each
// branch from (Rung.Resume). The session guest must have let go of the
// view first, and takes it back after.
func (s *sessionSandbox) Snapshot(ctx context.Context, dir string) error {
	return s.save(ctx, dir, false)
}

// Park saves the VM's whole state (RAM, devices: the session guest, its
// workspace's tmpfs, the shell's state) to dir/ParkFile and ends QEMU,
// and with it everything the sandbox held on the host: a parked session
// holds no RAM. The session guest must have let go of the view first
// (wire.VerbSessionPark): QEMU refuses to migrate while 9p is attached.
// On failure the VM runs on (the caller unparks the guest).
func (s *sessionSandbox) Park(ctx context.Context, dir string) error {
	return s.save(ctx, dir, true)
}

// save saves the VM to dir/ParkFile; then quit ends QEMU and the sandbox,
// else the VM runs on.
func (s *sessionSandbox) save(ctx context.Context, dir string, quit bool) error {
	// The parked guest sends no heartbeat, and QEMU saving the VM stops
	// it: the next call (unparking) arms the watch again.
	s.disarm()
	t := s.t
	if t.fc != nil {
		return s.fcSave(ctx, dir, quit)
	}
	if t.erofs != "" {
		// The restored VM gets the same drive again (Resume): its memory
		// holds the erofs's metadata as its kernel read it.
		if err := writeErofsID(filepath.Join(dir, ParkImageFile), t.erofs); err != nil {
			return fmt.Errorf("parking the session's VM: %w", err)
		}
	}
	q, err := s.monitor(ctx)
	if err != nil {
		return t.GuestErr("parking the session's VM", err)
	}
	path := filepath.Join(dir, ParkFile)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	err = q.saveTo(ctx, f)
	if err == nil {
		err = f.Sync()
	}
	f.Close()
	if err != nil {
		os.Remove(path)
		os.Remove(filepath.Join(dir, ParkImageFile))
		// Stopped for the save: let it run again, so that the session
		// goes on where it was.
		q.exec(context.WithoutCancel(ctx), "cont", nil, nil)
		return fmt.Errorf("parking the session's VM: %w", err)
	}
	if !quit {
		// Saved: the VM goes on from where it stopped.
		if _, err := q.exec(ctx, "cont", nil, nil); err != nil {
			return fmt.Errorf("resuming the VM after its snapshot: %w", err)
		}
		return nil
	}
	// Saved: QEMU ends (quit, else the kill in Close) and the host frees
	// the view, the ports, netsim.
	q.exec(ctx, "quit", nil, nil)
	s.Close()
	return nil
}

// Resume restores a VM that Park saved to dir for a session opened with
// spec: a fresh view guest, view, netsim and ports, and QEMU started with
// the same machine and devices and the saved state as its incoming
// migration. The session guest is as it was at park, waiting for its next
// request (wire.VerbSessionUnpark first) on the new ctrl port.
func (r *Rung) Resume(ctx context.Context, spec dryexec.SandboxSpec, dir string) (dryexec.Sandbox[wire.SessionStart], error) {
	var want *erofsID
	if spec.Image != nil {
		id, err := readErofsID(filepath.Join(dir, ParkImageFile))
		if err != nil {
			return nil, fmt.Errorf("resuming a vm session on an image: %w", err)
		}
		want = &id
	}
	// A park on Firecracker has its state and memory files; QEMU's, its
	// saved state alone. The VMM that saved it restores it.
	saved := &savedVM{vmm: VMMQEMU}
	names := []string{ParkFile}
	if _, err := os.Lstat(filepath.Join(dir, FCStateFile)); err == nil {
		saved.vmm, names = VMMFirecracker, []string{FCStateFile, FCMemFile}
	}
	for _, name := range names {
		f, err := openSaved(filepath.Join(dir, name))
		if err != nil {
			closeAll(saved.files)
			return nil, fmt.Errorf("resuming a vm session: %w", err)
		}
		saved.files = append(saved.files, f)
	}
	s, err := r.openSession(ctx, spec, saved, want)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// openSaved opens a parked VM's file to restore it from. The caller checked
// the saved state, but the directory is writable: it is opened as the
// regular file it was, never through a link swapped in since, and without
// blocking on a FIFO (its open would wait forever). The VMM reads it
// through the descriptor (incomingFD), never by its name.
func openSaved(path string) (*os.File, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Mode&unix.S_IFMT != unix.S_IFREG || unix.SetNonblock(fd, false) != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	return os.NewFile(uintptr(fd), path), nil
}

// ParkImageFile names, in the park dir of a vm session on an image, the
// identity of the image's erofs drive the saved VM had (erofsID).
const ParkImageFile = "vm.image"

// erofsID is an erofs image of the cache as a file: the restored VM must
// get the very file its kernel read (the saved memory holds its metadata,
// where its inodes are), not one the cache built again for the same digest
// after a prune (mkfs.erofs's layout and UUID may differ). Cached erofs
// files are never written after their rename into place: a new inode is a
// new build.
type erofsID struct {
	Dev     uint64 `json:"dev"`
	Ino     uint64 `json:"ino"`
	Size    int64  `json:"size"`
	MtimeNS int64  `json:"mtime_ns"`
}

func erofsIdentity(path string) (erofsID, error) {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return erofsID{}, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	return erofsID{Dev: st.Dev, Ino: st.Ino, Size: st.Size, MtimeNS: st.Mtim.Nano()}, nil
}

func writeErofsID(path, erofs string) error {
	id, err := erofsIdentity(erofs)
	if err != nil {
		return err
	}
	b, err := json.Marshal(id)
	if err != nil {
		return err
	}
	return durable.WriteFile(path, b)
}

// readErofsID reads what writeErofsID wrote, as a regular file of at most
// a few hundred bytes, never through a link (the park dir is writable).
func readErofsID(path string) (erofsID, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return erofsID{}, fmt.Errorf("the saved state's image drive: %w", &os.PathError{Op: "open", Path: path, Err: err})
	}
	f := os.NewFile(uintptr(fd), path)
	defer f.Close()
	if st, err := f.Stat(); err != nil || !st.Mode().IsRegular() {
		return erofsID{}, fmt.Errorf("the saved state's image drive: %s is not a regular file", path)
	}
	b, err := io.ReadAll(io.LimitReader(f, 1<<10))
	if err != nil {
		return erofsID{}, err
	}
	var id erofsID
	if err := json.Unmarshal(b, &id); err != nil || id.Ino == 0 {
		return erofsID{}, fmt.Errorf("the saved state's image drive: %s: not a drive's identity", path)
	}
	return id, nil
}

// checkErofs fails unless the erofs the restored VM is to get is the one
// the saved VM had (want; nil: not a restore on an image).
func (t *trial) checkErofs(want *erofsID) error {
	if want == nil {
		return nil
	}
	got, err := erofsIdentity(t.erofs)
	if err != nil {
		return err
	}
	if got != *want {
		return fmt.Errorf("%w: resuming a vm session on an image: the image's erofs drive (%s) is not the one the parked VM read (the image cache pruned and built it again since): the saved memory would not match it", ErrDriveChanged, t.erofs)
	}
	return nil
}

// ErrDriveChanged: a parked vm session on an image cannot resume, the
// image's erofs having been built again since the park.
var ErrDriveChanged = errors.New("vm: the image's drive changed since the park")

// restore builds the view, has the view guest become QEMU restoring the
// saved state, and lets the VM run once all of it is in, within the boot's
// bound. Cancelling ctx meanwhile kills QEMU.
func (s *sessionSandbox) restore(ctx context.Context) error {
	t := s.t
	ctx, cancel := context.WithTimeout(ctx, t.r.bootTimeout()+t.r.walkGrace())
	defer cancel()
	stop := context.AfterFunc(ctx, t.Kill)
	defer stop()
	if err := t.prepare(); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("resuming a vm session: %w", context.Cause(ctx))
		}
		return err
	}
	if t.fc != nil {
		// Firecracker's load resumed the VM (bootFirecracker).
		t.boot = time.Since(t.bootStart)
		t.r.trace("hello")
		return nil
	}
	q, err := s.monitor(ctx)
	if err != nil {
		return t.GuestErr("restoring the session's VM", err)
	}
	if err := q.waitIncoming(ctx, true); err != nil {
		return t.GuestErr("restoring the session's VM", err)
	}
	t.boot = time.Since(t.bootStart)
	t.r.trace("hello")
	return nil
}

// monitor is the client of QEMU's monitor, connected on first use.
func (s *sessionSandbox) monitor(ctx context.Context) (*qmp, error) {
	if s.q != nil {
		return s.q, nil
	}
	if s.t.qmp == nil {
		return nil, errors.New("the VM has no monitor")
	}
	q, err := dialQMP(ctx, s.t.qmp)
	s.t.qmp = nil
	if err != nil {
		return nil, err
	}
	s.q = q
	return q, nil
}
