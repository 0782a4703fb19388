package guest

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/internal/imagemount"
)

// overlayBuilder mounts the overlays of one trial's view under root.
type overlayBuilder struct {
	scratch  string          // the scratch tmpfs: u/N upper, w/N work, s/N skeleton dirs
	root     string          // where the new root is assembled
	rootless bool            // overlays must use user.* xattrs
	locked   map[string]bool // mount points that may not be inside a lower (rootless)
	uppers   []string        // host path of each upper dir, by index
	seed     string          // wire.TrialStart.SeedUppers
	skel     int
	// sealed are directories the caller cannot list (rootless), shown as
	// empty read-only ones: nothing beneath them is overlaid.
	sealed []string
}

// errVanished: a directory to overlay is gone. Host mounts come and go (other
// containers, automounts, other programs' scratch mounts): one listed in the
// plan may have been unmounted and its mount point removed before the guest got
// to it. Its parent's overlay already covers the path, so it is skipped.
var errVanished = errors.New("vanished")

// maxSkeletonCopy bounds the files copied into a split overlay's skeleton; a
// larger file at that level is bound read-only instead.
const maxSkeletonCopy = 1 << 20

// dir overlays host directory p at root+p. Where p has a locked mount somewhere
// beneath it, p cannot be a lower: p is overlaid over a skeleton of itself (its
// entries, with empty directories for subdirectories and mount points), and each
// subdirectory gets an overlay of its own, split again where needed. Writes at
// p's own level are still captured, in p's upper dir.
func (b *overlayBuilder) dir(p string) error {
	target := b.root + p
	if p == "/" {
		target = b.root
	}
	for _, sp := range b.sealed {
		if strings.HasPrefix(p+"/", sp+"/") {
			return nil // beneath a sealed directory: not reachable
		}
	}
	if !b.hasLockedBeneath(p) {
		return b.overlay(p, p, target)
	}
	skel := b.scratch + "/s/" + strconv.Itoa(b.skel)
	b.skel++
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return errVanished
		}
		return fmt.Errorf("stat %s: %w", p, err)
	}
	if err := os.Mkdir(skel, os.FileMode(st.Mode&0o777)); err != nil {
		return err
	}
	d, err := os.Open(p)
	if errors.Is(err, os.ErrPermission) {
		return b.seal(p, target)
	}
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return errVanished
		}
		return fmt.Errorf("listing %s: %w", p, err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return fmt.Errorf("listing %s: %w", p, err)
	}
	var subdirs, binds []string
	for _, n := range names {
		hp := path.Join(p, n)
		var cst unix.Stat_t
		if err := unix.Lstat(hp, &cst); err != nil {
			continue
		}
		sp := skel + "/" + n
		mode := os.FileMode(cst.Mode & 0o777)
		switch cst.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if err := os.Mkdir(sp, mode); err != nil {
				return err
			}
			if !b.locked[hp] {
				subdirs = append(subdirs, n)
			}
		case unix.S_IFLNK:
			t, err := os.Readlink(hp)
			if err == nil {
				err = os.Symlink(t, sp)
			}
			if err != nil {
				return fmt.Errorf("copying symlink %s: %w", hp, err)
			}
		case unix.S_IFREG:
			if cst.Size > maxSkeletonCopy || b.locked[hp] {
				if err := os.WriteFile(sp, nil, mode); err != nil {
					return err
				}
				binds = append(binds, n)
			} else if err := copyFile(hp, sp, mode); err != nil {
				return err
			}
		}
		// A copy keeps the host's mtime, as a lower shows it: overlayfs
		// preserves it when the sandbox copies the file up without writing
		// (a chmod, an open for writing), and the host would otherwise see
		// a touch (fsdelta's Touched) that never happened.
		if k := cst.Mode & unix.S_IFMT; k == unix.S_IFLNK || (k == unix.S_IFREG && cst.Size <= maxSkeletonCopy && !b.locked[hp]) {
			ts := []unix.Timespec{unix.NsecToTimespec(cst.Atim.Nano()), unix.NsecToTimespec(cst.Mtim.Nano())}
			if err := unix.UtimesNanoAt(unix.AT_FDCWD, sp, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return fmt.Errorf("copying the times of %s: %w", hp, err)
			}
		}
	}
	if err := b.overlay(p, skel, target); err != nil {
		return err
	}
	for _, n := range binds {
		if err := unix.Mount(path.Join(p, n), target+"/"+n, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("binding %s: %w", path.Join(p, n), err)
		}
	}
	for _, n := range subdirs {
		if err := b.dir(path.Join(p, n)); err != nil && !errors.Is(err, errVanished) {
			return err
		}
	}
	return nil
}

// seal shows p, a directory the caller may not list and that holds a
// mount somewhere beneath it (so it cannot be an overlay's lower, and its
// skeleton cannot be made without its names), as an empty directory on a
// read-only tmpfs that no one may list: the command cannot read or write
// there, as on the host, and nothing it could do there needs capturing.
// Rootless only: root can list everything. Why it matters: a root-owned
// private directory with mounts inside (Docker's /var/lib/docker, a test's
// scratch mount under /tmp) otherwise made every rootless trial fail. What
// is lost: names beneath p that the caller could reach by path without
// listing p (a mode 0711 p) are not there in the sandbox.
func (b *overlayBuilder) seal(p, target string) error {
	if err := unix.Mount("sealed", target, "tmpfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=0,mode=0000"); err != nil {
		if errors.Is(err, unix.ENOENT) {
			return errVanished
		}
		return fmt.Errorf("sealing %s, which cannot be listed: %w", p, err)
	}
	b.sealed = append(b.sealed, p)
	return nil
}

func (b *overlayBuilder) hasLockedBeneath(p string) bool {
	prefix := strings.TrimSuffix(p, "/") + "/"
	for mp := range b.locked {
		if strings.HasPrefix(mp, prefix) {
			return true
		}
	}
	return false
}

// overlay mounts an overlay at target whose lower is lowerPath and whose upper
// dir stands for host path hostPath.
func (b *overlayBuilder) overlay(hostPath, lowerPath, target string) error {
	// The lower goes in as /proc/self/fd/N: the option string then never holds
	// a host path, whose commas or colons would change its meaning.
	fd, err := unix.Open(lowerPath, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) && hostPath != "/" {
			return errVanished
		}
		return fmt.Errorf("opening lower %s: %w", lowerPath, err)
	}
	defer unix.Close(fd)
	i := strconv.Itoa(len(b.uppers))
	u, w := b.scratch+"/u/"+i, b.scratch+"/w/"+i
	if err := os.Mkdir(u, 0o755); err != nil {
		return err
	}
	if err := b.seedUpper(i, u); err != nil {
		return err
	}
	if err := os.Mkdir(w, 0o755); err != nil {
		return err
	}
	// Metacopy and the index are off whatever the kernel's defaults
	// (CONFIG_OVERLAY_FS_*, module parameters): a metacopy file in an upper
	// does not hold what the merged view shows, and the walk refuses it
	// (fswalk.Walk); the index only serves those and nfs_export.
	//
	// As root, redirect_dir=on: renaming a host dir with rename(2) then works
	// as on the host (without it overlayfs says EXDEV, which mv survives by
	// copying, but programs that call rename(2) directly do not), and the
	// walk reports such a dir from its redirect xattr (trusted.*, which the
	// command cannot write). A user namespace refuses redirect_dir=on
	// ("redirect_dir requires permission to access trusted xattrs", and with
	// userxattr "conflicting options"), so rootless it stays nofollow: the
	// rename fails with EXDEV. nofollow, not off: "off" means "follow" where
	// the module's redirect_always_follow is set (the usual default), and
	// userxattr refuses any explicit redirect_dir but nofollow.
	//
	// xino=auto: without it a file the sandbox hard-links to a host file shows
	// another st_dev and st_ino through the new name than through the old one
	// (the old name still reports the lower's), and git's local clone aborts
	// ("hardlink different from source"). auto, not on: it never fails a mount
	// where the layers leave no spare inode bits, it only does without.
	opts := "lowerdir=/proc/self/fd/" + strconv.Itoa(fd) + ",upperdir=" + u + ",workdir=" + w +
		",metacopy=off,index=off,xino=auto"
	if b.rootless {
		opts += ",redirect_dir=nofollow,userxattr"
	} else {
		opts += ",redirect_dir=on"
	}
	// nodev: a device node somewhere in a host directory (a chroot's /dev, a
	// container image) must not open the host's device; the sandbox's own
	// devices are in its /dev, a separate mount.
	if err := unix.Mount("overlay", target, "overlay", unix.MS_NODEV, opts); err != nil {
		if errors.Is(err, unix.ENOENT) && hostPath != "/" {
			// The lower is held open; what is missing is the mount point, which
			// went from the host (so from the parent overlay's view) meanwhile.
			// Index i is free again for the next overlay.
			os.Remove(u)
			os.RemoveAll(w) // overlay may have left its work/ in it
			return errVanished
		}
		return fmt.Errorf("overlay over %s: %w", hostPath, err)
	}
	b.uppers = append(b.uppers, hostPath)
	return nil
}

// image mounts the view's root as an overlay of an image's layers (lowest
// first) with the upper dir that stands for "/". Beneath the image goes a
// layer of the scratch tmpfs holding the mount points the sandbox's own
// /proc, /dev and /sys need: an image built from scratch may lack them, and
// making them in the upper would report them as the command's changes.
// Beneath, not on top: where the image has them, its own are what shows.
// Nothing is ever written under them (each is a mount of its own), so the
// host's view of the image (imagemount.Overlay without them) compares the same.
// extra are more mount points of that layer, beneath the root: an empty
// directory for a path ending in "/", else an empty file (the gvisor view
// binds its guest onto one).
func (b *overlayBuilder) image(layers []string, extra ...string) error {
	init := b.scratch + "/image-init"
	for _, d := range []string{"", "/proc", "/dev", "/sys"} {
		if err := os.Mkdir(init+d, 0o755); err != nil {
			return err
		}
	}
	for _, p := range extra {
		var err error
		if d, ok := strings.CutSuffix(p, "/"); ok {
			err = os.Mkdir(init+d, 0o755)
		} else {
			err = os.WriteFile(init+p, nil, 0o555)
		}
		if err != nil {
			return err
		}
	}
	u, w := b.scratch+"/u/0", b.scratch+"/w/0"
	for _, d := range []string{u, w} {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
	}
	// Rootless, the layers are the cache's userxattr form (linuxns.checkImage).
	mfd, err := imagemount.Overlay(append([]string{init}, layers...), u, w, b.rootless)
	if err != nil {
		return err
	}
	defer unix.Close(mfd)
	if err := unix.MoveMount(mfd, "", unix.AT_FDCWD, b.root, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
		return fmt.Errorf("image overlay: attaching the view's root: %w", err)
	}
	b.uppers = append(b.uppers, "/")
	return nil
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		// Unreadable (rootless, someone else's file): the sandbox could not
		// read it either; an empty placeholder keeps the name visible.
		return os.WriteFile(dst, nil, mode)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, mode)
	if err != nil {
		return err
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	return err
}

// seedUpper fills upper dir u (index i) from b.seed, before its overlay is
// mounted: an overlay's upper may not change under it. cp -a keeps what
// overlayfs wrote there (whiteouts, opaque and redirect xattrs).
func (b *overlayBuilder) seedUpper(i, u string) error {
	if b.seed == "" {
		return nil
	}
	src := b.seed + "/" + i
	if _, err := os.Lstat(src); errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	for _, cp := range []string{"/bin/cp", "/usr/bin/cp"} {
		if _, err := os.Stat(cp); err != nil {
			continue
		}
		if out, err := exec.Command(cp, "-a", "--", src+"/.", u).CombinedOutput(); err != nil {
			return fmt.Errorf("seeding upper %s: %w: %s", i, err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	return errors.New("seeding an upper dir: no cp in /bin or /usr/bin")
}
