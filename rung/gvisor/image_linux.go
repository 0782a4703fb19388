package gvisor

import (
	"context"
	"os"

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

// placeGuest makes the container's process the guest where the view guest
// bound it in the image's view (wire.GVisorImageGuest). Not a bind mount of
// the spec's: runsc's gofer makes those on the host side of the root, whose
// writes are the trial's, and would make its mount point there.
func placeGuest(spec map[string]any) {
	proc := spec["process"].(map[string]any)
	proc["args"].([]string)[0] = wire.GVisorImageGuest
}
