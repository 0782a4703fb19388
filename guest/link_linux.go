package guest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
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
// call itself; when the two names then report two identities and the source
// is a regular file the caller owns (with a group it may give), it makes the
// source a plain upper file the caller could have made itself: the same
// bytes copied to a temporary name in the source's dir, its group, the xattrs
// it can see, mode and times set, renamed over the source; the new name is
// then linked to it afresh (another temporary name renamed over it), and the
// source dir gets back the times it had after the link (a native link leaves
// them). Both names are then one inode with one identity, as natively; the
// Differ reports the source as a host file that only gained a link (same
// bytes, mode and mtime as the host's) and commit links the new name to the
// host file. Anything the worker cannot do exactly leaves the link as the
// overlay made it (two identities, as before).

// linkCalls are the link calls the renamer handles.
var linkCalls = []string{"link", "linkat"}

// linkTempPrefix begins the names of the temporary files the link worker
// makes (and removes, or renames over the link's names).
const linkTempPrefix = ".dryexec-link-"

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
			w := &renameWork{ctx: ctx, n: n, creds: cr}
			return w.link(oldBase, newBase, req)
		})
	}
}

// link makes the link with the caller's rights and, where the overlay left
// the two names two identities, makes them one (unshareLink).
func (w *renameWork) link(oldBase, newBase int, req renameReq) seccomp.Answer {
	od, on, ok1 := splitPath(req.oldPath)
	nd, nn, ok2 := splitPath(req.newPath)
	if !ok1 || !ok2 {
		return contAnswer
	}
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_NO_MAGICLINKS}
	opd, err := unix.Openat2(oldBase, od, how)
	if err != nil {
		return contAnswer
	}
	defer unix.Close(opd)
	npd, err := unix.Openat2(newBase, nd, how)
	if err != nil {
		return contAnswer
	}
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
	w.unshareLink(opd, on, npd, nn)
	return seccomp.Answer{}
}

// unshareLink makes on (in opd) and nn (in npd), one inode that the overlay
// reports with two identities, a plain upper file with one. It gives up,
// leaving the link as the overlay made it, on anything it cannot do exactly
// as the caller could.
func (w *renameWork) unshareLink(opd int, on string, npd int, nn string) {
	var so, sn unix.Stat_t
	if unix.Fstatat(opd, on, &so, unix.AT_SYMLINK_NOFOLLOW) != nil || unix.Fstatat(npd, nn, &sn, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return
	}
	if so.Dev == sn.Dev && so.Ino == sn.Ino {
		return // one identity already (a file of the upper's own)
	}
	if so.Mode&unix.S_IFMT != unix.S_IFREG || sn.Mode&unix.S_IFMT != unix.S_IFREG || so.Nlink != sn.Nlink || so.Size != sn.Size {
		return
	}
	// The caller must be able to make the file exactly: its own, with a
	// group it may give it.
	if int(so.Uid) != w.creds.fsuid || (int(so.Gid) != w.creds.fsgid && !slices.Contains(w.creds.groups, int(so.Gid))) {
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
	dir, err := unix.Openat(opd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return
	}
	defer unix.Close(dir)
	var ds unix.Stat_t
	if unix.Fstat(dir, &ds) != nil {
		return
	}
	tmp, err := w.plainCopy(opd, on, &so)
	if err != nil {
		return
	}
	if !w.live() {
		unix.Unlinkat(opd, tmp, 0)
		return
	}
	if err := unix.Renameat(opd, tmp, opd, on); err != nil {
		unix.Unlinkat(opd, tmp, 0)
		return
	}
	// The new name to the plain file: linked apart, then renamed over, so it
	// is never missing.
	if tmp2, err := tempName(); err == nil {
		if unix.Linkat(opd, on, npd, tmp2, 0) == nil {
			if unix.Renameat(npd, tmp2, npd, nn) != nil {
				unix.Unlinkat(npd, tmp2, 0)
			}
		}
	}
	// A native link leaves the source's dir as it was (its times were read
	// after the link, so a link within one dir keeps the link's).
	setTimes(dir, &ds)
}

// plainCopy copies file on in dfd (st) to a new file in dfd with the same
// bytes, group, xattrs the caller can see, mode and times, and returns its
// name; on an error it leaves nothing behind.
func (w *renameWork) plainCopy(dfd int, on string, st *unix.Stat_t) (name string, err error) {
	sfd, err := unix.Openat(dfd, on, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return "", err
	}
	src := os.NewFile(uintptr(sfd), on)
	defer src.Close()
	var again unix.Stat_t
	if err := unix.Fstat(sfd, &again); err != nil || !sameFile(st, &again) {
		return "", errCannot
	}
	name, err = tempName()
	if err != nil {
		return "", err
	}
	dfdNew, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return "", err
	}
	dst := os.NewFile(uintptr(dfdNew), name)
	defer dst.Close()
	defer func() {
		if err != nil {
			unix.Unlinkat(dfd, name, 0)
		}
	}()
	n, err := io.Copy(dst, src)
	if err != nil {
		return "", err
	}
	if n != st.Size {
		return "", errCannot
	}
	var now unix.Stat_t
	if err := unix.Fstat(dfdNew, &now); err != nil {
		return "", err
	}
	if now.Gid != st.Gid {
		if err := unix.Fchown(dfdNew, -1, int(st.Gid)); err != nil {
			return "", err
		}
	}
	if err := copyXattrsExact(sfd, dfdNew); err != nil {
		return "", err
	}
	if err := unix.Fchmod(dfdNew, st.Mode&0o7777); err != nil {
		return "", err
	}
	if err := setTimes(dfdNew, st); err != nil {
		return "", err
	}
	if err := unix.Fstat(dfdNew, &now); err != nil {
		return "", err
	}
	if now.Mode != st.Mode || now.Uid != st.Uid || now.Gid != st.Gid || now.Size != st.Size || now.Mtim != st.Mtim {
		return "", errCannot
	}
	// Changed while it was copied (by the caller itself): the copy may not
	// hold what the file holds.
	if err := unix.Fstatat(dfd, on, &again, unix.AT_SYMLINK_NOFOLLOW); err != nil || !sameFile(st, &again) || again.Ctim != st.Ctim {
		return "", errCannot
	}
	return name, nil
}

// sameFile reports whether b is still the file a was: identity, size, mtime.
func sameFile(a, b *unix.Stat_t) bool {
	return a.Dev == b.Dev && a.Ino == b.Ino && a.Size == b.Size && a.Mtim == b.Mtim
}

// tempName is a new temporary name for the link worker's files.
func tempName() (string, error) {
	var b [8]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return linkTempPrefix + hex.EncodeToString(b[:]), nil
}

// setTimes sets fd's access and modification times to st's.
func setTimes(fd int, st *unix.Stat_t) error {
	ts := [2]unix.Timespec{st.Atim, st.Mtim}
	if _, _, e := unix.Syscall6(unix.SYS_UTIMENSAT, uintptr(fd), 0, uintptr(unsafe.Pointer(&ts[0])), 0, 0, 0); e != 0 {
		return e
	}
	return nil
}

// copyXattrsExact copies every xattr the caller can see from one file to
// another, and fails if one cannot be copied (the copy would not be the
// file).
func copyXattrsExact(from, to int) error {
	sz, err := unix.Flistxattr(from, nil)
	if err != nil || sz == 0 {
		if errors.Is(err, unix.ENOTSUP) {
			return nil
		}
		return err
	}
	buf := make([]byte, sz)
	if sz, err = unix.Flistxattr(from, buf); err != nil {
		return err
	}
	for name := range strings.SplitSeq(string(buf[:sz]), "\x00") {
		if name == "" {
			// The end, or all there was: the overlay counts its own
			// xattrs (user.overlay.*) when asked for the size, then
			// leaves them out.
			continue
		}
		vsz, err := unix.Fgetxattr(from, name, nil)
		if err != nil {
			return err
		}
		v := make([]byte, vsz)
		if vsz, err = unix.Fgetxattr(from, name, v); err != nil {
			return err
		}
		if err := unix.Fsetxattr(to, name, v[:vsz], 0); err != nil {
			return err
		}
	}
	return nil
}
