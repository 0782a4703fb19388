package guest

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"

	"github.com/dryexec/dryexec/wire"
	"golang.org/x/sys/unix"
)

// Masked secrets. Each masked host path (cfg.Masks: ~/.ssh, ~/.aws, …, the
// host already resolved symlinks) is covered in the sandbox's view by a bind
// mount from a small tmpfs of our own: a file as an empty file, a directory as
// a mirror of its names (subdirectories as directories, everything else as
// empty files), so `cat ~/.ssh/id_rsa` opens an empty file rather than
// failing a lookup — which leaves no trace — and the attempt is seen.
//
// Seeing it: the tmpfs is mounted strictatime and every mask entry gets the
// atime wire.MaskAtime; reading a file or listing a directory moves its atime to
// now. The host compares after the command (rung/linuxns), from outside the
// sandbox. As root the entries are also immutable (FS_IMMUTABLE_FL, which the
// command's user namespace cannot clear): no write, chmod or utimes. Rootless
// the command owns them (one uid is mapped), so a determined command can reset
// an atime it moved: the content is never there either way; the record is
// best effort (docs/limits.md).

// Bounds of a directory's mirror: ~/.ssh and friends are small; a huge masked
// tree is mirrored only this far (the rest simply does not appear).
const (
	maskMaxEntries = 1024
	maskMaxDepth   = 4
)

// mountMasks covers root+p for each p in masks, then for each p in hidden,
// before pivot_root. scratch is the trial's scratch tmpfs, where the masks'
// own tmpfs is briefly mounted.
//
// A hidden path (dryexec's own state: its home with the daemon's token, every
// trial's delta and blobs, the receipt key, the daemon's socket) is covered
// whole, not mirrored: an empty directory or an empty file, mode 0 (and
// immutable as root), on a read-only bind mount, so that there are no names
// to list, no content to read and nothing to write. A unix socket is covered
// by an empty file: connecting to it is refused. The command cannot undo a
// mount: its user namespace owns no mount namespace.
func mountMasks(scratch, root string, masks, hidden []string, rootless bool) error {
	if len(masks) == 0 && len(hidden) == 0 {
		return nil
	}
	src := scratch + "/m"
	if err := os.Mkdir(src, 0o700); err != nil {
		return err
	}
	if err := unix.Mount("dryexec-masks", src, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC|unix.MS_STRICTATIME,
		"mode=0755,size=1m,nr_inodes="+strconv.Itoa(2*maskMaxEntries)); err != nil {
		return fmt.Errorf("mounting the masks' tmpfs: %w", err)
	}
	// The bind mounts below stay; the tmpfs's own mount goes, so nothing of
	// the scratch tmpfs leads to them.
	defer unix.Unmount(src, unix.MNT_DETACH)
	left := maskMaxEntries
	for i, p := range masks {
		if !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
			return fmt.Errorf("mask %q is not a clean absolute path", p)
		}
		target := root + p
		var st unix.Stat_t
		if err := unix.Lstat(target, &st); err != nil {
			if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
				continue // nothing there to hide
			}
			return fmt.Errorf("mask %s: %w", p, err)
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK {
			continue // the host resolved links; one here is not a host secret
		}
		m := src + "/" + strconv.Itoa(i)
		var err error
		if st.Mode&unix.S_IFMT == unix.S_IFDIR {
			err = mirrorDir(target, m, 0, &left, !rootless)
		} else {
			err = emptyFile(m, !rootless)
		}
		if err != nil {
			return fmt.Errorf("mask %s: %w", p, err)
		}
		if err := unix.Mount(m, target, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("mask %s: %w", p, err)
		}
	}
	for i, p := range hidden {
		if err := hide(src+"/h"+strconv.Itoa(i), root, p, rootless); err != nil {
			return fmt.Errorf("hiding %s: %w", p, err)
		}
	}
	return nil
}

// hide covers root+p with an empty directory or file made at m (see
// mountMasks), read-only.
func hide(m, root, p string, rootless bool) error {
	if !path.IsAbs(p) || path.Clean(p) != p || p == "/" {
		return fmt.Errorf("not a clean absolute path")
	}
	target := root + p
	var st unix.Stat_t
	if err := unix.Lstat(target, &st); err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
			return nil // nothing there to hide
		}
		return err
	}
	if st.Mode&unix.S_IFMT == unix.S_IFLNK {
		return nil // the host resolved links; one here is not dryexec's
	}
	if st.Mode&unix.S_IFMT == unix.S_IFDIR {
		if err := os.Mkdir(m, 0o700); err != nil {
			return err
		}
	} else if err := os.WriteFile(m, nil, 0o400); err != nil {
		return err
	}
	if err := seal(m, 0, !rootless); err != nil {
		return err
	}
	if err := unix.Mount(m, target, "", unix.MS_BIND, ""); err != nil {
		return err
	}
	// The masks' tmpfs stays writable (reads of a mask move its atime);
	// this bind of it does not.
	const flags = unix.MS_REMOUNT | unix.MS_BIND | unix.MS_RDONLY | unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	return unix.Mount("", target, "", flags, "")
}

// mirrorDir makes dst a directory holding the names of host directory src:
// subdirectories as directories (down to maskMaxDepth), other entries as
// empty files. Entries get wire.MaskAtime; dirs end up 0555 and files 0444.
func mirrorDir(src, dst string, depth int, left *int, immutable bool) error {
	if err := os.Mkdir(dst, 0o700); err != nil {
		return err
	}
	var names []string
	if d, err := os.Open(src); err == nil {
		names, _ = d.Readdirnames(-1)
		d.Close()
	}
	for _, n := range names {
		if *left <= 0 {
			break
		}
		*left--
		var st unix.Stat_t
		if unix.Lstat(src+"/"+n, &st) != nil {
			continue
		}
		var err error
		if st.Mode&unix.S_IFMT == unix.S_IFDIR && depth+1 < maskMaxDepth {
			err = mirrorDir(src+"/"+n, dst+"/"+n, depth+1, left, immutable)
		} else {
			err = emptyFile(dst+"/"+n, immutable)
		}
		if err != nil {
			return err
		}
	}
	return seal(dst, 0o555, immutable)
}

// fsImmutableFL is FS_IMMUTABLE_FL of linux/fs.h (not in x/sys/unix).
const fsImmutableFL = 0x10

func emptyFile(p string, immutable bool) error {
	if err := os.WriteFile(p, nil, 0o400); err != nil {
		return err
	}
	return seal(p, 0o444, immutable)
}

// seal sets p's mode and its atime/mtime to wire.MaskAtime, then (as root) makes it
// immutable. Order matters: an immutable inode refuses chmod and utimes.
func seal(p string, mode uint32, immutable bool) error {
	if err := unix.Chmod(p, mode); err != nil {
		return err
	}
	ts := []unix.Timespec{{Sec: wire.MaskAtime}, {Sec: wire.MaskAtime}}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	if !immutable {
		return nil
	}
	// O_RDONLY|O_NONBLOCK opens without reading, which would move the atime.
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	flags, err := unix.IoctlGetUint32(fd, unix.FS_IOC_GETFLAGS)
	if err != nil {
		return nil // a tmpfs without attributes (< 6.0): mode bits only
	}
	unix.IoctlSetPointerInt(fd, unix.FS_IOC_SETFLAGS, int(flags|fsImmutableFL))
	return nil
}
