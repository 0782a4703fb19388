package image

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"golang.org/x/sys/unix"
)

// mkfsErofs runs mkfs.erofs on view into out. mkfs.erofs takes its source
// by path and resolves it (realpath): a detached mount's /proc/self/fd path
// resolves to "/", which would pack the host's root. So a clone of the view
// is attached at a directory in tmp/ in a mount namespace of a thread of its
// own, mkfs.erofs runs in that namespace, and the mount goes with the
// thread: the host's namespace never holds it, even after a crash.
func mkfsErofs(ctx context.Context, mkfs, cache, out string, view *os.File) error {
	at, err := os.MkdirTemp(filepath.Join(cache, "tmp"), "erofs-view-")
	if err != nil {
		return err
	}
	defer os.Remove(at)
	done := make(chan error, 1)
	go func() {
		// Never unlocked: the thread, in a namespace of its own, ends with
		// this goroutine.
		runtime.LockOSThread()
		done <- func() error {
			if err := unix.Unshare(unix.CLONE_NEWNS); err != nil {
				return fmt.Errorf("unshare: %w", err)
			}
			if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
				return fmt.Errorf("making the mounts private: %w", err)
			}
			// A clone: attaching the caller's own detached mount would
			// tie it to this namespace, which ends with the thread.
			fd, err := unix.OpenTree(int(view.Fd()), "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH|unix.AT_RECURSIVE)
			if err != nil {
				return fmt.Errorf("cloning the image's view: %w", err)
			}
			defer unix.Close(fd)
			if err := unix.MoveMount(fd, "", unix.AT_FDCWD, at, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
				return fmt.Errorf("attaching the image's view: %w", err)
			}
			return runMkfs(ctx, mkfs, out, at)
		}()
	}()
	return <-done
}
