package linuxns

import (
	"fmt"
	"os"
	"path"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/imagemount"
	"github.com/dryexec/dryexec/wire"
)

// SupportsImages implements dryexec.ImageRung: a trial or session on an
// image mounts the image's layers as the lowers of the view's root overlay
// (docs/images.md).
func (r *Rung) SupportsImages() bool { return true }

// SupportsImages implements dryexec.ImageRung: an image trial runs cold
// (its sandbox is never the pool's template).
func (p *Pool) SupportsImages() bool { return true }

// checkImage refuses what an image view cannot do here.
func checkImage(img *dryexec.ImageRoot) error {
	if err := dryexec.CheckImage(&Rung{}, img); err != nil {
		return err
	}
	if os.Getuid() != 0 {
		// The layers' whiteouts are device nodes 0/0 and trusted.overlay.*
		// xattrs, which only an overlay mounted by root honours (a rootless
		// overlay reads user.overlay.*): the image package unpacks as root.
		return &dryexec.IsolationUnavailableError{Rung: Name, Missing: "sandboxes from an image need root (the image cache's layers are root's overlay form)"}
	}
	return nil
}

// imageSandbox is the sandbox of a trial on an image: one overlay at "/"
// over the image's layers, no masks (nothing of the host is in the view,
// its secrets and dryexec's own state included), the network as asked.
func imageSandbox(spec dryexec.TrialSpec) (sandbox, error) {
	if err := checkImage(spec.Image); err != nil {
		return sandbox{}, err
	}
	caDir, err := EnsureCA(spec.NetCADir)
	if err != nil {
		return sandbox{}, err
	}
	nets := spec.Net
	if len(nets) == 0 {
		nets = []string{"none"}
	}
	return sandbox{Mounts: []wire.MountSpec{{Path: "/"}}, Image: spec.Image.Layers, Limits: spec.Limits,
		UpperSize: spec.UpperSizeBytes, Net: nets, NetCADir: caDir}, nil
}

// imageView mounts the host's read-only merged view of the layers
// (detached: nothing appears in the host's mount table, and it is gone with
// the file).
func imageView(layers []string) (*os.File, error) { return ImageView(Name, layers) }

// checkImageCwd checks that an image trial's cwd is a directory of the
// image (for a view of the host, checkAction looked at the host's).
func (t *trial) checkImageCwd(cwd string) error {
	if t.imageView == nil {
		return nil
	}
	return CheckImageCwd(t.imageView, cwd)
}

// What the gvisor rung shares with ns for a sandbox on an image: the same
// checks and the same host's view of the image, so that both rungs refuse
// alike and diff against the same tree.

// CheckImageAction is CheckAction for a trial on an image: its cwd is a path
// in the image (CheckImageCwd), not on the host.
func CheckImageAction(a dryexec.Action) error { return checkAction(a, true) }

// ImageView is the host's read-only merged view of an image's layers, which
// a trial's upper dir is diffed against (fsdelta.Mount.Root); rung names the
// rung in its error.
func ImageView(rung string, layers []string) (*os.File, error) {
	fd, err := imagemount.Overlay(layers, "", "")
	if err != nil {
		return nil, &dryexec.IsolationUnavailableError{Rung: rung, Missing: err.Error()}
	}
	return os.NewFile(uintptr(fd), "image"), nil
}

// CheckImageCwd says whether cwd is a directory in the image view (resolved
// inside it: a symlink of the image cannot point it at the host's files).
func CheckImageCwd(view *os.File, cwd string) error {
	rel := path.Clean(cwd)[1:]
	if rel == "" {
		return nil
	}
	fd, err := unix.Openat2(int(view.Fd()), rel, &unix.OpenHow{
		Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
	if err != nil {
		return fmt.Errorf("%w: cwd %q is not a directory in the image", dryexec.ErrBadAction, cwd)
	}
	unix.Close(fd)
	return nil
}
