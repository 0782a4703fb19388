// Package imagemount owns mounting an OCI image's unpacked layers as one
// overlayfs (the new mount API, lowerdir+): the ns guest's writable root of
// a sandbox on an image, and the host's read-only merged view the Differ
// compares it with. Shared so that both sides stack the layers the same
// way; it links nothing but x/sys, as the guest binary must stay small.
package imagemount

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// Overlay makes a detached overlay mount (fsmount: attached nowhere,
// gone with its last descriptor) whose lowers are an image's unpacked layer
// directories, lowest first, and returns its mount descriptor. With upper and
// work it is a sandbox's writable root; without, a read-only merged view of
// the image (the host's view for the Differ, which compares the sandbox's
// writes with it as it compares them with the host's files otherwise).
//
// Why the mount API and lowerdir+, not mount(2): mount(2) takes the options
// as one page, which ends an image's stack at ≈ 200 layers however they are
// spelled, and a path holding a comma or colon would need escaping; each
// lowerdir+ is one path, up to overlayfs's own limit (500). Linux 6.8 added
// lowerdir+; an older kernel is refused with a clear error.
//
// userxattr mounts layers of the rootless form (opaque dirs as
// user.overlay.opaque), as a caller that is not root can in a user namespace
// of its own; redirects then stay nofollow, the only kind userxattr allows.
func Overlay(layers []string, upper, work string, userxattr bool) (int, error) {
	if len(layers) == 0 {
		return -1, errors.New("image overlay: no layers")
	}
	ro := upper == ""
	if ro && len(layers) == 1 {
		// overlayfs wants two lowers without an upper; one layer is its own
		// merged view (a base layer has nothing to white out).
		fd, err := unix.OpenTree(unix.AT_FDCWD, layers[0], unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err != nil {
			return -1, fmt.Errorf("image view of %s: %w", layers[0], err)
		}
		if err := unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NODEV}); err != nil {
			unix.Close(fd)
			return -1, fmt.Errorf("image view of %s: %w", layers[0], err)
		}
		return fd, nil
	}
	fsfd, err := unix.Fsopen("overlay", unix.FSOPEN_CLOEXEC)
	if err != nil {
		return -1, fmt.Errorf("image overlay: fsopen: %w", err)
	}
	defer unix.Close(fsfd)
	set := func(k, v string) error {
		if err := unix.FsconfigSetString(fsfd, k, v); err != nil {
			return fmt.Errorf("image overlay: %s=%s: %w%s", k, v, err, fsLog(fsfd))
		}
		return nil
	}
	// lowerdir+ takes the top layer first, as lowerdir's list does.
	for i := len(layers) - 1; i >= 0; i-- {
		if err := set("lowerdir+", layers[i]); err != nil {
			if errors.Is(err, unix.EINVAL) && i == len(layers)-1 {
				var u unix.Utsname
				unix.Uname(&u)
				return -1, fmt.Errorf("%w (sandboxes from an image need Linux 6.8 or later for overlayfs's lowerdir+; this is %s)", err, unix.ByteSliceToString(u.Release[:]))
			}
			return -1, err
		}
	}
	opts := [][2]string{{"metacopy", "off"}, {"index", "off"}, {"xino", "auto"}}
	if userxattr {
		if err := unix.FsconfigSetFlag(fsfd, "userxattr"); err != nil {
			return -1, fmt.Errorf("image overlay: userxattr: %w%s", err, fsLog(fsfd))
		}
	}
	if !ro {
		// As for a host mount (overlayBuilder.overlay): a renamed dir works as
		// rename(2) does, and the walk reports it from its redirect xattr.
		// Rootless (userxattr) only nofollow is allowed: such a rename is
		// EXDEV, and mv copies.
		redirect := "on"
		if userxattr {
			redirect = "nofollow"
		}
		opts = append(opts, [2]string{"upperdir", upper}, [2]string{"workdir", work}, [2]string{"redirect_dir", redirect})
	}
	for _, o := range opts {
		if err := set(o[0], o[1]); err != nil {
			return -1, err
		}
	}
	if err := unix.FsconfigCreate(fsfd); err != nil {
		return -1, fmt.Errorf("image overlay of %d layers: %w%s", len(layers), err, fsLog(fsfd))
	}
	attr := unix.MOUNT_ATTR_NODEV
	if ro {
		attr |= unix.MOUNT_ATTR_RDONLY
	}
	mfd, err := unix.Fsmount(fsfd, unix.FSMOUNT_CLOEXEC, attr)
	if err != nil {
		return -1, fmt.Errorf("image overlay: fsmount: %w", err)
	}
	return mfd, nil
}

// fsLog is what the filesystem said about a failed fsconfig (its messages
// are read from the context's descriptor).
func fsLog(fsfd int) string {
	var out []string
	buf := make([]byte, 512)
	for range 8 {
		n, err := unix.Read(fsfd, buf)
		if err != nil || n <= 0 {
			break
		}
		out = append(out, strings.TrimSpace(string(buf[:n])))
	}
	if len(out) == 0 {
		return ""
	}
	return " (" + strings.Join(out, "; ") + ")"
}

// SendView makes the read-only merged view of layers (Overlay without an
// upper) and sends its mount descriptor over the unix socket sock, or, if it
// cannot, the error's text without one. It is the whole of a helper a caller
// that is not root starts in a user and mount namespace of its own
// (wire.RoleImageView): only there may it mount an overlay, and the detached
// mount outlives the helper in the descriptor it hands over.
func SendView(sock int, layers []string, userxattr bool) error {
	fd, err := Overlay(layers, "", "", userxattr)
	if err != nil {
		return unix.Sendmsg(sock, []byte(err.Error()), nil, nil, 0)
	}
	defer unix.Close(fd)
	return unix.Sendmsg(sock, []byte{0}, unix.UnixRights(fd), nil, 0)
}
