package cli

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/image"
	"github.com/dryexec/dryexec/internal/apiclient"
)

// useImage resolves ref through the image cache in $DRYEXEC_HOME/images,
// pulling it on first use, and returns the spec on it: the image as its
// root, the action's cwd (a path in the image; "" is the image's
// WorkingDir, else /) and env folded in. release keeps the layers from rm
// and prune until the trial is over.
func useImage(ctx context.Context, env Env, ref string, spec dryexec.TrialSpec) (dryexec.TrialSpec, func(), error) {
	c, err := openImages(env)
	if err != nil {
		return spec, nil, err
	}
	img, release, pulled, err := c.Ensure(ctx, ref, image.PullOptions{})
	if err != nil {
		return spec, nil, err
	}
	if pulled {
		fmt.Fprintf(env.Stderr, "dryexec: pulled %s (%s, %d layers)\n", ref, img.Digest, len(img.Layers))
	}
	spec.Image = c.Root(ref, img)
	spec.Action = dryexec.ImageAction(spec.Action, spec.Image)
	spec.Action.Env["PWD"] = spec.Action.Cwd
	return spec, release, nil
}

// checkImageCwd: -C with --image names a directory in the image, so it must
// be absolute (there is no current directory in the image to resolve it
// against).
func checkImageCwd(cwd string) error {
	if cwd != "" && (!path.IsAbs(cwd) || strings.ContainsRune(cwd, 0)) {
		return usageError{fmt.Errorf("-C %s: with --image, give an absolute directory in the image", cwd)}
	}
	return nil
}

// daemonImageErr is imageErr for the daemon's answer: an image it could not
// have (422 image_unavailable) is refused, exit 1, as in this process; a
// reference that does not parse came back as bad_request (exit 2) already.
func daemonImageErr(env Env, code *int, err error) error {
	var de *apiclient.Error
	if errors.As(err, &de) && de.Code == "image_unavailable" {
		fmt.Fprintln(env.Stderr, "dryexec:", err)
		*code = ExitRefused
		return nil
	}
	return err
}
