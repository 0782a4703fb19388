package server

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/image"
)

// imageFor resolves ref through the daemon's image cache
// (StoreDir/images, where `dryexec images` keeps it), pulling it on first
// use (docs/images.md). release keeps its layers from rm and prune until the
// sandbox is gone.
func (s *Service) imageFor(ctx context.Context, ref string) (*dryexec.ImageRoot, func(), error) {
	c, err := image.Open(filepath.Join(s.cfg.StoreDir, "images"), s.cfg.Log)
	if err != nil {
		return nil, nil, err
	}
	// A pull decompresses and hashes in two goroutines at once.
	done := s.cfg.background()
	img, release, pulled, err := c.Ensure(ctx, ref, image.PullOptions{})
	done()
	if err != nil {
		return nil, nil, err
	}
	if pulled {
		s.cfg.Log.Info("image pulled", "image", ref, "digest", img.Digest, "layers", len(img.Layers))
	}
	return c.Root(ref, img), release, nil
}

// imageErrStatus maps the image cache's errors: a reference that does not
// parse is the caller's (400 bad_request); an image that cannot be had
// (missing, refused by its registry, not for this platform, bad content) is
// 422 image_unavailable; too many layers too.
func imageErrStatus(err error, e *APIError) (int, bool) {
	switch {
	case errors.Is(err, image.ErrBadReference):
		e.Code = "bad_request"
		return http.StatusBadRequest, true
	case errors.Is(err, image.ErrNotFound), errors.Is(err, image.ErrUnauthorized), errors.Is(err, image.ErrPlatformNotFound),
		errors.Is(err, image.ErrBadDigest), errors.Is(err, image.ErrUnsupportedMediaType), errors.Is(err, image.ErrUnsafeLayer),
		errors.Is(err, image.ErrUnsupportedHost), errors.Is(err, dryexec.ErrTooManyLayers):
		e.Code = "image_unavailable"
		return http.StatusUnprocessableEntity, true
	case errors.Is(err, dryexec.ErrImageCommit):
		e.Code = "image_commit"
		return http.StatusConflict, true
	}
	return 0, false
}
