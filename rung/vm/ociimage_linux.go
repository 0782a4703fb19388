package vm

import (
	"os"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/rung/linuxns"
	"github.com/dryexec/dryexec/wire"
)

// SupportsImages implements dryexec.ImageRung: a trial on an image runs
// over a view whose root is one overlay of the image's layers, built on the
// host by the view guest as for gvisor, with its upper dir on the host, and
// exported to the VM over 9p like a view of the host (docs/images.md). The
// delta is the walk of that upper dir against the image, as on ns.
func (r *Rung) SupportsImages() bool { return true }

// imageSandbox is sandboxFor for a trial on spec.Image: one mount, "/",
// whose lowers are the image's layers; no masks (nothing of the host's
// filesystem is in the view, as on ns); the network as asked.
func imageSandbox(spec dryexec.TrialSpec) (sandbox, error) {
	if err := dryexec.CheckImage(&Rung{}, spec.Image); err != nil {
		return sandbox{}, err
	}
	if spec.Image.UserXattr {
		// The vm rung runs as root: a rootless cache's opaque dirs
		// (user.overlay.*) would not be honoured by root's overlay.
		return sandbox{}, unavailable("an image from the cache of a user that is not root (the vm rung runs as root, with root's image cache)")
	}
	caDir, err := linuxns.EnsureCA(spec.NetCADir)
	if err != nil {
		return sandbox{}, err
	}
	nets := spec.Net
	if len(nets) == 0 {
		nets = []string{"none"}
	}
	return sandbox{mounts: []wire.MountSpec{{Path: "/"}}, image: spec.Image.Layers, caDir: caDir, net: nets,
		limits: spec.Limits, upperSize: spec.UpperSizeBytes}, nil
}

// openImage takes the host's read-only view of the trial's image, which the
// walk compares the upper dir with, and checks the cwd in it.
func (t *trial) openImage() error {
	if t.sb.image == nil {
		return nil
	}
	v, err := linuxns.ImageView(Name, t.sb.image)
	if err != nil {
		return err
	}
	t.imageView = v
	return linuxns.CheckImageCwd(v, t.Spec.Action.Cwd)
}

// diffAgainstImage has the walk compare the upper dir with the image, not
// with the host's "/".
func (t *trial) diffAgainstImage() {
	if t.imageView == nil {
		return
	}
	for i := range t.Uppers {
		t.Uppers[i].Root = t.imageView
	}
}

// imageDelta says, in the delta, which image the trial ran on.
func imageDelta(spec dryexec.TrialSpec, d *dryexec.StateDelta) {
	if d != nil && spec.Image != nil {
		d.Image = &dryexec.DeltaImage{Ref: spec.Image.Ref, Digest: spec.Image.Digest, Workspace: spec.Action.Cwd}
	}
}

func closeImage(f *os.File) {
	if f != nil {
		f.Close()
	}
}

// SupportsImages implements dryexec.ImageRung: an image trial runs cold
// (Rung.Trial).
func (p *Pool) SupportsImages() bool { return true }

// checkAction checks spec's action: its cwd on the host, or, on an image,
// in the image (openImage does, once the image's view is open).
func checkAction(spec dryexec.TrialSpec) error {
	if spec.Image != nil {
		return linuxns.CheckImageAction(spec.Action)
	}
	return linuxns.CheckAction(spec.Action)
}
