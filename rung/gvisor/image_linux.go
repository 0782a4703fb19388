package gvisor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/rung/linuxns"
	"github.com/dryexec/dryexec/wire"
)

// SupportsImages implements dryexec.ImageRung: a trial or session on an
// image runs over a view whose root is one overlay of the image's layers,
// built by the view guest as the ns guest builds it (docs/images.md).
func (r *Rung) SupportsImages() bool { return true }

// imageTrial runs a trial on spec.Image: its cwd is checked in the image,
// the delta is over the image and says so (DeltaImage), as on ns.
func (r *Rung) imageTrial(ctx context.Context, spec dryexec.TrialSpec) (*dryexec.StateDelta, error) {
	if err := linuxns.CheckImageAction(spec.Action); err != nil {
		return nil, err
	}
	if spec.TrialID == "" {
		spec.TrialID = dryexec.NewTrialID()
	}
	b, err := r.newImageBox(ctx, spec.TrialID, spec.Image, spec.Net, spec.NetCADir)
	if err != nil {
		return nil, err
	}
	if err := linuxns.CheckImageCwd(b.imageView, spec.Action.Cwd); err != nil {
		b.net.Close()
		b.imageView.Close()
		return nil, err
	}
	d, err := b.trial(ctx, spec)
	if d != nil {
		d.Image = &dryexec.DeltaImage{Ref: spec.Image.Ref, Digest: spec.Image.Digest, Workspace: spec.Action.Cwd}
	}
	return d, err
}

// newImageBox is newBox for a sandbox on img: one mount, "/", whose lowers
// are the image's layers; no masks (nothing of the host's filesystem is in
// the view, its secrets and dryexec's own state included: as on ns); the
// host's read-only view of the image to diff the upper dir against.
func (r *Rung) newImageBox(ctx context.Context, id string, img *dryexec.ImageRoot, net []string, caDir string) (*box, error) {
	if err := dryexec.CheckImage(r, img); err != nil {
		return nil, err
	}
	if os.Geteuid() != 0 {
		return nil, unavailable("root: the gvisor rung runs runsc as root (rootless runsc is not supported yet)")
	}
	runsc, err := FindRunsc(r.Runsc)
	if err != nil {
		return nil, unavailable(err.Error())
	}
	caDir, err = linuxns.EnsureCA(caDir)
	if err != nil {
		return nil, err
	}
	view, err := linuxns.ImageView(Name, img.Layers)
	if err != nil {
		return nil, err
	}
	nw, err := linuxns.NewNet(ctx, net, caDir, id)
	if err != nil {
		view.Close()
		return nil, err
	}
	b := r.box(id, runsc, nw)
	b.Mounts = []wire.MountSpec{{Path: "/"}}
	b.image, b.imageView = img, view
	return b, nil
}

// imageLayers are the layer dirs the view guest stacks at "/" (nil: the
// host's view).
func (b *box) imageLayers() []string {
	if b.image == nil {
		return nil
	}
	return b.image.Layers
}

// diffAgainstImage has the walk compare the upper dir with the image, not
// with the host's "/".
func (b *box) diffAgainstImage() {
	if b.imageView == nil {
		return
	}
	for i := range b.Uppers {
		b.Uppers[i].Root = b.imageView
	}
}

// imageSpec adapts the container's spec to a view on an image: its process
// is the guest where the view guest bound it (wire.GVisorImageGuest; not a
// bind mount of the spec's, which runsc's gofer would make on the host side
// of the root, where its mount point would be a write of the trial), and
// /tmp is the view's own.
//
// runsc mounts a tmpfs of gVisor's memory at /tmp when the root's /tmp is
// empty or missing, as an image's usually is (a host's rarely): what the
// command wrote there would never reach the upper dir, and the delta would
// silently lack it; where /tmp is missing, runsc's mount point would even
// be a change of the trial. An explicit mount at /tmp stops that: a bind of
// the view's /tmp onto itself, by absolute paths (the gofer checks that a
// mount's destination opens as the very path it was given, which a root
// named relative to the bundle fails). For an image without /tmp, the
// bind is of the empty directory beneath the image (buildGVisorView makes
// it), read-only: a write there fails, as it fails on ns for want of the
// directory, rather than vanish. An image whose /tmp is a symlink (which
// the gofer will not mount over) gets gVisor's tmpfs, and the delta a
// warning.
func (b *box) imageSpec(spec map[string]any) error {
	proc := spec["process"].(map[string]any)
	proc["args"].([]string)[0] = wire.GVisorImageGuest
	opt := "rw"
	fd, err := unix.Openat2(int(b.imageView.Fd()), "tmp", &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
	switch {
	case err == nil:
		unix.Close(fd)
	case errors.Is(err, unix.ENOENT):
		opt = "ro"
	default:
		b.warnings = append(b.warnings, "the image's /tmp is not a directory: gVisor gave the sandbox a /tmp of its own memory, and what the command wrote there is not in this delta")
		return nil
	}
	return b.bindTmp(spec, opt)
}

// hostTmpSpec is imageSpec's /tmp for a view of the host: the view's /tmp
// bound onto itself, so that runsc mounts no tmpfs of its own there. The
// host's /tmp is empty more often than one would think (a daemon under
// systemd's PrivateTmp starts with an empty one), and then every write the
// command made in /tmp would silently miss the delta. A view without a
// /tmp directory (none on the host, or a symlink) gets gVisor's tmpfs and
// the delta a warning.
func (b *box) hostTmpSpec(spec map[string]any) error {
	fd, err := unix.Openat2(b.ScratchFD, "root/tmp", &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS})
	if err != nil {
		b.warnings = append(b.warnings, "the host's /tmp is not a directory: gVisor gave the sandbox a /tmp of its own memory, and what the command wrote there is not in this delta")
		return nil
	}
	unix.Close(fd)
	return b.bindTmp(spec, "rw")
}

// bindTmp names the view's root by its absolute path and binds the view's
// /tmp onto itself (opt: "rw" or "ro"): the gofer checks that a mount's
// destination opens as the very path it was given, which a root named
// relative to the bundle fails.
func (b *box) bindTmp(spec map[string]any, opt string) error {
	scratch, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(b.ScratchFD))
	if err != nil {
		return fmt.Errorf("finding the view's scratch dir: %w", err)
	}
	root := scratch + "/root"
	spec["root"] = map[string]any{"path": root, "readonly": false}
	spec["mounts"] = append(spec["mounts"].([]map[string]any),
		map[string]any{"destination": "/tmp", "type": "bind", "source": root + "/tmp", "options": []string{"rbind", opt}})
	return nil
}
