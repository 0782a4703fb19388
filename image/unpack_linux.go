package image

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/wire"
)

// Overlay's own whiteout forms (Documentation/filesystems/overlayfs.rst): a
// character device 0/0 hides a lower name, an opaque xattr hides a lower
// directory's whole content. The device 0/0 anyone may make (Linux 5.8 on);
// the opaque xattr is trusted.overlay.opaque for an overlay mounted by root
// (setting it needs CAP_SYS_ADMIN), user.overlay.opaque for one mounted with
// userxattr in a user namespace (a rootless caller's; Form).
const (
	whPrefix      = ".wh."
	whOpaque      = ".wh..wh..opq"
	opaqueKey     = "trusted.overlay.opaque"
	userOpaqueKey = "user.overlay.opaque"
)

// beneath is how every path inside a layer is resolved: never above the
// layer's root, never through a symlink (a layer's own symlinks are data for
// the sandbox, not paths for the unpacker), never across a mount.
const beneath = unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV

// canUnpack says why this host cannot unpack, or nil: Linux unpacks as root
// (FormRoot) or as anyone else (FormUserXattr).
func canUnpack() error { return nil }

// callerForm is the form this process unpacks in and mounts: root's, or the
// userxattr form for anyone else.
func callerForm() Form {
	if os.Geteuid() == 0 {
		return FormRoot
	}
	return FormUserXattr
}

// unpacker writes one layer's tar into dir as an overlayfs layer.
type unpacker struct {
	root int // O_PATH fd of the layer's directory
	form Form
	// upper: the tar is an upper dir's (UnpackUpper): whiteouts are char
	// devices 0/0, opaque dirs have wire.VMUpperOpaque, .wh. names are names.
	upper bool
	log   *slog.Logger
	// dirTimes are applied at the end: entries written into a directory
	// after it change its mtime.
	dirTimes []dirTime
	skipped  int
}

type dirTime struct {
	path string
	h    *tar.Header
}

// unpackLayer unpacks the tar stream r into the empty directory dir.
func unpackLayer(ctx context.Context, r io.Reader, dir string, form Form, log *slog.Logger) (skipped int, err error) {
	return unpack(ctx, r, dir, form, false, log)
}

func unpack(ctx context.Context, r io.Reader, dir string, form Form, upper bool, log *slog.Logger) (skipped int, err error) {
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return 0, fmt.Errorf("image: opening %s: %w", dir, err)
	}
	defer unix.Close(fd)
	u := &unpacker{root: fd, form: form, upper: upper, log: log}
	tr := tar.NewReader(r)
	for {
		if err := ctx.Err(); err != nil {
			return u.skipped, err
		}
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return u.skipped, fmt.Errorf("%w: %w", ErrUnsafeLayer, err)
		}
		if err := u.entry(h, tr); err != nil {
			return u.skipped, fmt.Errorf("%s: %w", h.Name, err)
		}
	}
	for i := len(u.dirTimes) - 1; i >= 0; i-- {
		d := u.dirTimes[i]
		pfd, base, err := u.parent(d.path, false)
		if err != nil {
			continue // replaced by a later entry
		}
		// The directory's own mode only now: unpacked 0700 or more, so that
		// a read-only directory of the image (dr-xr-xr-x) can still be
		// filled by a caller that is not root. Deepest first (children
		// were appended after their parents), so each is still reachable.
		_ = unix.Fchmodat(pfd, base, mode(d.h), 0)
		u.times(pfd, base, d.h)
		unix.Close(pfd)
	}
	return u.skipped, nil
}

func (u *unpacker) entry(h *tar.Header, body io.Reader) error {
	p, err := cleanName(h.Name)
	if err != nil {
		return err
	}
	if p == "." {
		return nil // the layer's root is the cache's directory
	}
	base := path.Base(p)
	if strings.HasPrefix(base, whPrefix) && !u.upper {
		return u.whiteout(p, base)
	}
	switch h.Typeflag {
	case tar.TypeXGlobalHeader:
		return nil
	case tar.TypeChar, tar.TypeBlock:
		if u.upper && h.Typeflag == tar.TypeChar && h.Devmajor == 0 && h.Devminor == 0 {
			return u.hide(path.Dir(p), base)
		}
		// Device nodes are never created: a sandbox gets its own /dev, and a
		// device file in the cache would be a door to the host's devices.
		u.log.Debug("image: device node skipped", "path", p)
		u.skipped++
		return nil
	case tar.TypeDir, tar.TypeReg, tar.TypeSymlink, tar.TypeLink, tar.TypeFifo:
	default:
		u.log.Debug("image: entry of unknown type skipped", "path", p, "type", h.Typeflag)
		u.skipped++
		return nil
	}
	pfd, base, err := u.parent(p, true)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if h.Typeflag == tar.TypeDir {
		var st unix.Stat_t
		err := unix.Fstatat(pfd, base, &st, unix.AT_SYMLINK_NOFOLLOW)
		if err == nil && st.Mode&unix.S_IFMT != unix.S_IFDIR {
			if err := removeAt(pfd, base); err != nil {
				return err
			}
			err = unix.ENOENT
		}
		if errors.Is(err, unix.ENOENT) {
			if err := unix.Mkdirat(pfd, base, 0o700); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		if err := u.owner(pfd, base, h); err != nil {
			return err
		}
		if err := unix.Fchmodat(pfd, base, mode(h)|0o700, 0); err != nil {
			return err
		}
		u.xattrs(pfd, base, h)
		if u.upper && h.PAXRecords[wire.VMUpperOpaque] == "y" {
			if err := u.setOpaque(p); err != nil {
				return err
			}
		}
		u.dirTimes = append(u.dirTimes, dirTime{p, h})
		return nil
	}
	if err := removeAt(pfd, base); err != nil {
		return err
	}
	switch h.Typeflag {
	case tar.TypeReg: // tar.Reader turns the old TypeRegA into TypeReg
		fd, err := unix.Openat(pfd, base, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(fd), base)
		_, err = io.Copy(f, body)
		if err == nil && u.form == FormRoot {
			err = f.Chown(h.Uid, h.Gid)
		}
		if err == nil {
			// After the chown, which clears setuid and setgid.
			err = unix.Fchmod(fd, mode(h))
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	case tar.TypeSymlink:
		// The target is stored as written, absolute or not: it is resolved
		// only inside the sandbox, whose root is the image.
		if err := unix.Symlinkat(h.Linkname, pfd, base); err != nil {
			return err
		}
		if err := u.owner(pfd, base, h); err != nil {
			return err
		}
	case tar.TypeLink:
		t, err := cleanName(h.Linkname)
		if err != nil {
			return err
		}
		tfd, tbase, err := u.parent(t, false)
		if errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("%w: hardlink to %q, which this layer does not hold", ErrUnsafeLayer, h.Linkname)
		}
		if err != nil {
			return fmt.Errorf("hardlink to %q: %w", h.Linkname, err)
		}
		defer unix.Close(tfd)
		// linkat without AT_SYMLINK_FOLLOW links a symlink itself, never
		// what it points at.
		if err := unix.Linkat(tfd, tbase, pfd, base, 0); err != nil {
			if errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("%w: hardlink to %q, which this layer does not hold", ErrUnsafeLayer, h.Linkname)
			}
			return err
		}
		return nil // a hardlink shares its target's metadata
	case tar.TypeFifo:
		if err := unix.Mkfifoat(pfd, base, mode(h)); err != nil {
			return err
		}
		if err := u.owner(pfd, base, h); err != nil {
			return err
		}
	}
	u.xattrs(pfd, base, h)
	u.times(pfd, base, h)
	return nil
}

// whiteout writes the overlay form of an OCI whiteout.
func (u *unpacker) whiteout(p, base string) error {
	dir := path.Dir(p)
	if base == whOpaque {
		return u.setOpaque(dir)
	}
	if strings.HasPrefix(base, whPrefix+whPrefix) {
		return nil // other AUFS bookkeeping (.wh..wh.plnk etc.): not content
	}
	name := strings.TrimPrefix(base, whPrefix)
	if name == "" || name == "." || name == ".." {
		return fmt.Errorf("%w: whiteout %q names nothing", ErrUnsafeLayer, p)
	}
	return u.hide(dir, name)
}

// setOpaque marks the directory dir opaque in the overlay form of u's.
func (u *unpacker) setOpaque(dir string) error {
	fd, err := u.dir(dir, true)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	rfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(rfd)
	key := opaqueKey
	if u.form == FormUserXattr {
		key = userOpaqueKey
	}
	return unix.Fsetxattr(rfd, key, []byte("y"), 0)
}

// hide makes name in dir a whiteout (overlay's char device 0/0), in place
// of whatever was unpacked there.
func (u *unpacker) hide(dir, name string) error {
	pfd, err := u.dir(dir, true)
	if err != nil {
		return err
	}
	defer unix.Close(pfd)
	if err := removeAt(pfd, name); err != nil {
		return err
	}
	return unix.Mknodat(pfd, name, unix.S_IFCHR, 0)
}

// parent opens p's directory (creating missing ones as 0755 directories when
// create) and returns it with p's last element.
func (u *unpacker) parent(p string, create bool) (int, string, error) {
	fd, err := u.dir(path.Dir(p), create)
	return fd, path.Base(p), err
}

// dir opens the directory d of the layer, beneath its root and through no
// symlink. A layer that puts a symlink where a later entry needs a directory
// (the write-through-a-symlink attack) fails here.
func (u *unpacker) dir(d string, create bool) (int, error) {
	how := &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: beneath}
	fd, err := unix.Openat2(u.root, d, how)
	if err == nil || !create || !errors.Is(err, unix.ENOENT) {
		return fd, resolveErr(d, err)
	}
	// Step by step, creating what is missing.
	cur, err := unix.Dup(u.root)
	if err != nil {
		return -1, err
	}
	for _, c := range strings.Split(d, "/") {
		if err := unix.Mkdirat(cur, c, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
			unix.Close(cur)
			return -1, err
		}
		next, err := unix.Openat2(cur, c, how)
		unix.Close(cur)
		if err != nil {
			return -1, resolveErr(d, err)
		}
		cur = next
	}
	return cur, nil
}

func resolveErr(d string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.EXDEV):
		return fmt.Errorf("%w: %q is reached through a symlink or a file", ErrUnsafeLayer, d)
	case errors.Is(err, unix.ENOSYS):
		return fmt.Errorf("%w: openat2: %w", ErrUnsupportedHost, err)
	}
	return err
}

// removeAt removes name in dir fd, whatever it is; nothing there is fine.
func removeAt(fd int, name string) error {
	err := unix.Unlinkat(fd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) {
		return err
	}
	how := &unix.OpenHow{Flags: unix.O_RDONLY | unix.O_DIRECTORY | unix.O_CLOEXEC | unix.O_NOFOLLOW, Resolve: beneath}
	dfd, err := unix.Openat2(fd, name, how)
	if err != nil {
		return err
	}
	d := os.NewFile(uintptr(dfd), name)
	names, err := d.Readdirnames(-1)
	if err == nil {
		for _, n := range names {
			if err = removeAt(dfd, n); err != nil {
				break
			}
		}
	}
	d.Close()
	if err != nil {
		return err
	}
	return unix.Unlinkat(fd, name, unix.AT_REMOVEDIR)
}

// owner gives the entry the tar's owner as root; in the userxattr form
// every file stays the caller's (docs/images.md, "Rootless").
func (u *unpacker) owner(pfd int, base string, h *tar.Header) error {
	if u.form != FormRoot {
		return nil
	}
	return unix.Fchownat(pfd, base, h.Uid, h.Gid, unix.AT_SYMLINK_NOFOLLOW)
}

func (u *unpacker) times(pfd int, base string, h *tar.Header) {
	at := h.AccessTime
	if at.IsZero() {
		at = h.ModTime
	}
	ts := []unix.Timespec{unix.NsecToTimespec(at.UnixNano()), unix.NsecToTimespec(h.ModTime.UnixNano())}
	// Best effort: a time is not worth failing a pull over.
	_ = unix.UtimesNanoAt(pfd, base, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// xattrs applies the entry's user.* extended attributes but user.overlay.*.
// Others are dropped: trusted.overlay.* (and, for an overlay mounted with
// userxattr, user.overlay.*) from a layer could forge whiteouts or redirects
// in the overlay stack, and security.capability grants nothing under
// no_new_privs. user.overlay.* goes in both forms: one rule, and it is
// nothing a program of the image reads.
func (u *unpacker) xattrs(pfd int, base string, h *tar.Header) {
	for k, v := range h.PAXRecords {
		key, ok := strings.CutPrefix(k, "SCHILY.xattr.")
		if !ok || !strings.HasPrefix(key, "user.") || strings.HasPrefix(key, "user.overlay.") {
			continue
		}
		if err := unix.Lsetxattr("/proc/self/fd/"+strconv.Itoa(pfd)+"/"+base, key, []byte(v), 0); err != nil {
			u.log.Debug("image: xattr not kept", "path", h.Name, "key", key, "err", err)
		}
	}
}

// mode is the entry's permission bits with setuid, setgid and sticky kept:
// the cache directory is 0700, so no other host user can run a setuid file
// in it, and inside a sandbox no_new_privs makes the bits inert.
func mode(h *tar.Header) uint32 {
	return uint32(h.Mode) & 0o7777
}

// UnpackUpper unpacks r, the tar of an overlay upper dir, into dir
// (empty), in the form this process's overlays use, with every check a
// pulled layer gets: the vm rung has a VM's upper dir (which the VM, not
// the host, wrote) sent back this way, and makes it the trial's upper dir
// on the host. Unlike a layer's, its marks are overlay's own, so that
// every name is a name: a whiteout is a char device 0/0 (the one device
// made), an opaque dir's entry has the PAX record wire.VMUpperOpaque "y", and an
// entry named .wh.foo is a file named .wh.foo. skipped counts the entries
// left out (other device nodes).
func UnpackUpper(ctx context.Context, r io.Reader, dir string, log *slog.Logger) (skipped int, err error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return unpack(ctx, r, dir, callerForm(), true, log)
}
