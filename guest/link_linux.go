package guest

import (
	"context"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/containment/seccomp"
)

// Hard links to the host's files, rootless.
//
// link(2) of a file that comes from the lower layer makes the overlay copy it
// up and link the new name to the copy. The old name's dentry still reports
// the lower file's st_dev and st_ino (the overlay found it there), while the
// new name, looked up afresh, reports the copy's own: finding the lower file
// from the copy means decoding its origin file handle, which a user
// namespace may not do (CAP_DAC_READ_SEARCH in the initial one). So in a
// rootless trial the two names of one inode look like two files, and a
// program that checks its link (git's local clone: "hardlink different from
// source") fails where natively it succeeds. As root the overlay decodes the
// origin and both names report the lower's identity.
//
// Rootless the filter therefore hands link and linkat to the supervisor too.
// A worker thread with exactly the caller's rights (see renamer) makes the
// call itself; when the new name then shows another identity than the source
// showed before the link (the overlay's two views of one file the caller
// owns), it moves the source's dentry, the only one that knows the lower
// file, to the new name (swapLink). The new name is then the file the source
// was, which is what git checks; the source, looked up afresh, shows the
// copy's identity (docs/limits.md). Both names are one inode in the upper:
// the Differ reports the source as a host file that only gained a link and
// commit links the new name to the host file. Making the source a plain
// upper file first (a copy renamed over it) was tried: both names then show
// the copy's identity, not the one git saw before the link, and the clone
// still aborted. Anything the worker cannot do exactly leaves the link as the
// overlay made it.

// linkCalls are the link calls the renamer handles.
var linkCalls = []string{"link", "linkat"}

// decodeLink reads a link call's arguments from its registers; the paths are
// read later. ok false: a call the worker does not make (AT_EMPTY_PATH, an
// unknown flag).
func decodeLink(n *seccomp.Notification) (req renameReq, oldArg, newArg int, ok bool) {
	req = renameReq{oldDir: unix.AT_FDCWD, newDir: unix.AT_FDCWD}
	switch seccomp.Name(n.Nr) {
	case "link":
		return req, 0, 1, true
	case "linkat":
		req.oldDir, req.newDir, req.flags = int32(n.Args[0]), int32(n.Args[2]), uint(uint32(n.Args[4]))
		return req, 1, 3, req.flags&^unix.AT_SYMLINK_FOLLOW == 0
	}
	return req, 0, 0, false
}

// handleLink answers one notified link call: at once (continue) for anything
// but a regular file, which the worker links.
func (r *renamer) handleLink(ctx context.Context, n *seccomp.Notification) (seccomp.Answer, func() seccomp.Answer) {
	req, oldArg, newArg, ok := decodeLink(n)
	if !ok {
		return contAnswer, nil
	}
	var err error
	if req.oldPath, err = readCString(n.PID, n.Args[oldArg]); err != nil {
		return contAnswer, nil
	}
	if req.newPath, err = readCString(n.PID, n.Args[newArg]); err != nil {
		return contAnswer, nil
	}
	proc := "/proc/" + strconv.Itoa(n.PID)
	// Only a regular file can need help; this look is the guest's own and
	// decides nothing but whether to look closer. A symlink (followed with
	// AT_SYMLINK_FOLLOW) is left to the kernel: following it in the worker
	// could reach the guest's own /proc/self.
	var st unix.Stat_t
	if unix.Lstat(magicPath(proc, req.oldDir, req.oldPath), &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
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
			w := &renameWork{ctx: ctx, n: n, creds: cr, afterStep: r.afterStep}
			return w.link(oldBase, newBase, req)
		})
	}
}

// link makes the link with the caller's rights and, where the overlay left
// the two names two identities, makes them one (swapLink).
func (w *renameWork) link(oldBase, newBase int, req renameReq) seccomp.Answer {
	opd, on, npd, nn, ok := openParents(oldBase, newBase, req)
	if !ok {
		return contAnswer
	}
	defer unix.Close(opd)
	defer unix.Close(npd)
	// The worker never follows the source: a symlink swapped in since the
	// supervisor's look is left to the kernel (the caller's own call).
	var st unix.Stat_t
	if unix.Fstatat(opd, on, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || st.Mode&unix.S_IFMT != unix.S_IFREG {
		return contAnswer
	}
	if err := unix.Linkat(opd, on, npd, nn, 0); err != nil {
		return errAnswer(err)
	}
	// The link is made: whatever happens next, the call succeeded.
	w.swapLink(opd, on, npd, nn, &st)
	return seccomp.Answer{}
}

// swapLink gives the new name nn (in npd) the identity the source on (in
// opd) showed before the link, where the overlay gave it another. Only the
// source's dentry knows the lower file, so it is moved to the new name, and
// the new name's dentry (looked up afresh, the copy's identity) to the
// source's: nn renamed to a temporary name beside the source, the source
// renamed to nn, the temporary name renamed to the source. The overlay
// refuses a rename between two names of one upper inode (ESTALE),
// RENAME_EXCHANGE included, hence the three steps. Each step the caller could
// make itself. It gives up, leaving the link as the overlay made it, on
// anything odd.
//
// The caller's other threads and processes may rename, remove or make the
// same names meanwhile (the link's caller waits; they do not). So every step
// is a rename with RENAME_NOREPLACE: the file always keeps a name (no step
// removes one, so a concurrent unlink of another name cannot take its last),
// and nothing another process made is replaced. A step that fails puts the
// file back at nn, where the link made it: the call has succeeded, so nn
// stays the file even when the source was renamed away meanwhile.
func (w *renameWork) swapLink(opd int, on string, npd int, nn string, before *unix.Stat_t) {
	var so, sn unix.Stat_t
	if unix.Fstatat(opd, on, &so, unix.AT_SYMLINK_NOFOLLOW) != nil || unix.Fstatat(npd, nn, &sn, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return
	}
	if sn.Dev == before.Dev && sn.Ino == before.Ino {
		return // the identity it had: nothing to do
	}
	if so.Dev != before.Dev || so.Ino != before.Ino || so.Mode&unix.S_IFMT != unix.S_IFREG || sn.Mode&unix.S_IFMT != unix.S_IFREG ||
		so.Nlink != sn.Nlink || so.Size != sn.Size || so.Mtim != sn.Mtim || so.Uid != sn.Uid || so.Gid != sn.Gid {
		return // not the overlay's two views of one file
	}
	// The caller's own file: a sticky dir lets it rename it.
	if int(so.Uid) != w.creds.fsuid {
		return
	}
	var fs unix.Statfs_t
	if unix.Fstatfs(opd, &fs) != nil || fs.Type != unix.OVERLAYFS_SUPER_MAGIC {
		return
	}
	om, _, err := mntID(opd, on)
	if err != nil {
		return
	}
	if nm, _, err := mntID(npd, nn); err != nil || nm != om {
		return
	}
	// The source's dir: a native link leaves its times, the moves below do
	// not (read after the link, so a link within one dir keeps the link's).
	dir, err := unix.Openat(opd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(dir)
	var ds unix.Stat_t
	if unix.Fstat(dir, &ds) != nil || !w.live() {
		return
	}
	// One worker thread makes one call at a time: its tid names the
	// temporary name uniquely among the workers (NOREPLACE refuses a name
	// the sandbox made).
	tmp := ".dryexec-link-" + strconv.Itoa(unix.Gettid())
	if unix.Renameat2(npd, nn, opd, tmp, unix.RENAME_NOREPLACE) != nil {
		return
	}
	w.step(linkStepKept)
	if unix.Renameat2(opd, on, npd, nn, unix.RENAME_NOREPLACE) != nil {
		// The source was renamed or removed meanwhile, or nn made.
		w.putBack(opd, tmp, npd, nn)
		return
	}
	w.step(linkStepMoved)
	var moved unix.Stat_t
	if unix.Fstatat(npd, nn, &moved, unix.AT_SYMLINK_NOFOLLOW) != nil || moved.Dev != before.Dev || moved.Ino != before.Ino {
		// Another file took the source's name meanwhile and was moved in
		// its place: it goes back.
		unix.Renameat2(npd, nn, opd, on, unix.RENAME_NOREPLACE)
		w.putBack(opd, tmp, npd, nn)
		return
	}
	if unix.Renameat2(opd, tmp, opd, on, unix.RENAME_NOREPLACE) != nil {
		// Another file took the source's name meanwhile: the file keeps
		// its new name (as if that file had been renamed over the source).
		dropKept(opd, tmp)
		return
	}
	setTimes(dir, &ds)
}

// putBack renames the new name's dentry, kept as tmp in opd, back to nn in
// npd: the link as the overlay made it. Where nn was made meanwhile the
// file keeps its other names.
func (w *renameWork) putBack(opd int, tmp string, npd int, nn string) {
	if unix.Renameat2(opd, tmp, npd, nn, unix.RENAME_NOREPLACE) != nil {
		dropKept(opd, tmp)
	}
}

// dropKept removes the temporary name tmp in opd if the file has another
// one; its last name is kept rather than lost.
func dropKept(opd int, tmp string) {
	var st unix.Stat_t
	if unix.Fstatat(opd, tmp, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Nlink > 1 {
		unix.Unlinkat(opd, tmp, 0)
	}
}

// The steps of swapLink a test may interleave with (renameWork.afterStep).
const (
	linkStepKept  = "kept"  // nn renamed to the temporary name
	linkStepMoved = "moved" // the source renamed to nn
)

// step runs the test's hook after a step of a link swap.
func (w *renameWork) step(name string) {
	if w.afterStep != nil {
		w.afterStep(name)
	}
}

// setTimes sets fd's access and modification times to st's.
func setTimes(fd int, st *unix.Stat_t) error {
	ts := [2]unix.Timespec{st.Atim, st.Mtim}
	if _, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0); e != 0 {
		return e
	}
	return nil
}
