package image

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// source is an image found, not yet fetched: its manifest is read, layers are
// not.
type source struct {
	img    v1.Image
	digest v1.Hash // of the manifest
	// platform is the image's own, from its config, else the one asked for.
	platform string
	// cleanup removes what opening the source made (an OCI archive's
	// extracted layout).
	cleanup func()
}

// open finds ref for platform. tmp is a directory in the cache where an OCI
// archive can be extracted.
func open(ctx context.Context, ref Ref, plat v1.Platform, kc authn.Keychain, tmp string) (*source, error) {
	switch ref.Kind {
	case FromRegistry:
		return openRegistry(ctx, ref, plat, kc)
	case FromOCILayout:
		return openLayout(ref.Name, ref, plat)
	case FromOCIArchive:
		dir, err := os.MkdirTemp(tmp, "archive-")
		if err != nil {
			return nil, err
		}
		clean := func() { removeAll(dir) }
		if err := extractArchive(ctx, ref.Name, dir); err != nil {
			clean()
			return nil, err
		}
		s, err := openLayout(dir, ref, plat)
		if err != nil {
			clean()
			return nil, err
		}
		s.cleanup = clean
		return s, nil
	case FromDockerArchive:
		return openDockerArchive(ref, plat)
	}
	return nil, fmt.Errorf("%w: unknown kind %q", ErrBadReference, ref.Kind)
}

func openRegistry(ctx context.Context, ref Ref, plat v1.Platform, kc authn.Keychain) (*source, error) {
	r, err := name.ParseReference(ref.Name)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadReference, err)
	}
	if kc == nil {
		kc = authn.DefaultKeychain
	}
	opts := []remote.Option{remote.WithContext(ctx), remote.WithAuthFromKeychain(kc)}
	desc, err := remote.Get(r, opts...)
	if err != nil {
		return nil, registryErr(ref.Name, err)
	}
	if d, ok := r.(name.Digest); ok {
		// go-containerregistry checks this too; checking it here makes the
		// error ours whatever it does.
		if got := desc.Digest.String(); got != d.DigestStr() {
			return nil, fmt.Errorf("%w: %s: registry served %s", ErrBadDigest, ref.Name, got)
		}
	}
	switch {
	case desc.MediaType.IsIndex():
		idx, err := desc.ImageIndex()
		if err != nil {
			return nil, registryErr(ref.Name, err)
		}
		return fromIndex(idx, ref, plat)
	case desc.MediaType.IsImage():
		img, err := desc.Image()
		if err != nil {
			return nil, registryErr(ref.Name, err)
		}
		return fromImage(img, ref, plat)
	}
	return nil, fmt.Errorf("%w: %s is %s", ErrUnsupportedMediaType, ref.Name, desc.MediaType)
}

// registryErr maps go-containerregistry's errors to ours.
func registryErr(what string, err error) error {
	var te *transport.Error
	if errors.As(err, &te) {
		re := &RegistryError{Status: te.StatusCode, Err: err}
		for _, d := range te.Errors {
			re.Codes = append(re.Codes, string(d.Code))
		}
		has := func(c transport.ErrorCode) bool { return slices.Contains(re.Codes, string(c)) }
		switch {
		case te.StatusCode == http.StatusUnauthorized || te.StatusCode == http.StatusForbidden ||
			has(transport.UnauthorizedErrorCode) || has(transport.DeniedErrorCode):
			return fmt.Errorf("%w: %s: %w", ErrUnauthorized, what, re)
		case te.StatusCode == http.StatusNotFound || has(transport.ManifestUnknownErrorCode) ||
			has(transport.NameUnknownErrorCode) || has(transport.BlobUnknownErrorCode):
			return fmt.Errorf("%w: %s: %w", ErrNotFound, what, re)
		case has(transport.DigestInvalidErrorCode):
			return fmt.Errorf("%w: %s: %w", ErrBadDigest, what, re)
		}
		return fmt.Errorf("image: %s: %w", what, re)
	}
	if strings.Contains(err.Error(), "does not match requested digest") {
		return fmt.Errorf("%w: %s: %w", ErrBadDigest, what, err)
	}
	if strings.Contains(err.Error(), "unsupported MediaType") || strings.Contains(err.Error(), "schema 1") {
		return fmt.Errorf("%w: %s: %w", ErrUnsupportedMediaType, what, err)
	}
	return fmt.Errorf("image: %s: %w", what, err)
}

// fromIndex picks plat's image from idx.
func fromIndex(idx v1.ImageIndex, ref Ref, plat v1.Platform) (*source, error) {
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("image: %s: reading index: %w", ref, err)
	}
	var avail []string
	for _, m := range im.Manifests {
		if m.Platform == nil {
			continue
		}
		avail = append(avail, m.Platform.String())
		if !m.MediaType.IsImage() || !m.Platform.Satisfies(plat) {
			continue
		}
		img, err := idx.Image(m.Digest)
		if err != nil {
			return nil, registryErr(ref.String(), err)
		}
		return fromImage(img, ref, plat)
	}
	return nil, &PlatformError{Want: plat.String(), Available: avail}
}

// fromImage checks img's media type and, where its config names one, its
// platform.
func fromImage(img v1.Image, ref Ref, plat v1.Platform) (*source, error) {
	mt, err := img.MediaType()
	if err != nil {
		return nil, registryErr(ref.String(), err)
	}
	if mt != types.OCIManifestSchema1 && mt != types.DockerManifestSchema2 {
		return nil, fmt.Errorf("%w: %s is %s", ErrUnsupportedMediaType, ref, mt)
	}
	dg, err := img.Digest()
	if err != nil {
		return nil, registryErr(ref.String(), err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, registryErr(ref.String(), err)
	}
	// A single-platform image whose config names another platform cannot
	// run here; one that names none (scratch-built images) is taken.
	have := plat
	if cf.OS != "" && cf.Architecture != "" {
		have = v1.Platform{OS: cf.OS, Architecture: cf.Architecture, Variant: cf.Variant}
		if !have.Satisfies(plat) {
			return nil, &PlatformError{Want: plat.String(), Available: []string{have.String()}}
		}
	}
	return &source{img: img, digest: dg, platform: have.String()}, nil
}

// openLayout finds ref in the OCI layout at dir: by digest, by tag (the
// org.opencontainers.image.ref.name annotation), or the only entry.
func openLayout(dir string, ref Ref, plat v1.Platform) (*source, error) {
	idx, err := layout.ImageIndexFromPath(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s: %w", ErrNotFound, ref, err)
		}
		return nil, fmt.Errorf("image: %s: not an OCI layout: %w", ref, err)
	}
	im, err := idx.IndexManifest()
	if err != nil {
		return nil, fmt.Errorf("image: %s: %w", ref, err)
	}
	var pick []v1.Descriptor
	for _, m := range im.Manifests {
		switch {
		case ref.Digest != "":
			if m.Digest.String() == ref.Digest {
				pick = append(pick, m)
			}
		case ref.Tag != "":
			if m.Annotations["org.opencontainers.image.ref.name"] == ref.Tag {
				pick = append(pick, m)
			}
		default:
			pick = append(pick, m)
		}
	}
	if len(pick) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, ref)
	}
	if len(pick) > 1 && ref.Tag == "" && ref.Digest == "" {
		return nil, fmt.Errorf("%w: %s holds %d entries: name one with :TAG or @DIGEST", ErrBadReference, ref, len(pick))
	}
	m := pick[0]
	switch {
	case m.MediaType.IsIndex():
		child, err := idx.ImageIndex(m.Digest)
		if err != nil {
			return nil, layoutErr(ref, err)
		}
		return fromIndex(child, ref, plat)
	case m.MediaType.IsImage():
		img, err := idx.Image(m.Digest)
		if err != nil {
			return nil, layoutErr(ref, err)
		}
		if err := verifyManifest(img, m.Digest); err != nil {
			return nil, fmt.Errorf("%s: %w", ref, err)
		}
		return fromImage(img, ref, plat)
	}
	return nil, fmt.Errorf("%w: %s is %s", ErrUnsupportedMediaType, ref, m.MediaType)
}

func layoutErr(ref Ref, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("%w: %s: %w", ErrNotFound, ref, err)
	}
	return fmt.Errorf("image: %s: %w", ref, err)
}

// verifyManifest checks that a manifest read from disk hashes to the digest
// its index names: a layout is a directory anyone may have edited.
func verifyManifest(img v1.Image, want v1.Hash) error {
	raw, err := img.RawManifest()
	if err != nil {
		return err
	}
	got, _, err := v1.SHA256(strings.NewReader(string(raw)))
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("%w: manifest is %s, the index says %s", ErrBadDigest, got, want)
	}
	return nil
}

// openDockerArchive reads a `docker save` tarball: the image tagged ref.Tag,
// or its only image.
func openDockerArchive(ref Ref, plat v1.Platform) (*source, error) {
	opener := func() (io.ReadCloser, error) { return os.Open(ref.Name) }
	mf, err := tarball.LoadManifest(opener)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("%w: %s: %w", ErrNotFound, ref, err)
		}
		return nil, fmt.Errorf("image: %s: not a docker archive: %w", ref, err)
	}
	var tag *name.Tag
	if ref.Tag != "" {
		t, err := name.NewTag(ref.Tag)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadReference, err)
		}
		found := false
		for _, d := range mf {
			for _, rt := range d.RepoTags {
				if rt2, err := name.NewTag(rt); err == nil && rt2.String() == t.String() {
					found = true
				}
			}
		}
		if !found {
			return nil, fmt.Errorf("%w: %s", ErrNotFound, ref)
		}
		tag = &t
	} else if len(mf) != 1 {
		return nil, fmt.Errorf("%w: %s holds %d images: name one with :REPO:TAG", ErrBadReference, ref, len(mf))
	}
	img, err := tarball.Image(opener, tag)
	if err != nil {
		return nil, fmt.Errorf("image: %s: %w", ref, err)
	}
	return fromImage(img, ref, plat)
}

// extractArchive unpacks an OCI archive (a tar of an OCI layout) into dir.
// Only directories and regular files are taken, beneath dir: a layout has no
// other kinds, and nothing in the tar can write elsewhere.
func extractArchive(ctx context.Context, file, dir string) error {
	f, err := os.Open(file)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("%w: %s: %w", ErrNotFound, file, err)
		}
		return err
	}
	defer f.Close()
	root, err := os.OpenRoot(dir)
	if err != nil {
		return err
	}
	defer root.Close()
	tr := tar.NewReader(f)
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		h, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("%w: %s: %w", ErrUnsafeLayer, file, err)
		}
		p, err := cleanName(h.Name)
		if err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		if p == "." {
			continue
		}
		switch h.Typeflag {
		case tar.TypeDir:
			if err := root.MkdirAll(p, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			if d := parentOf(p); d != "." {
				if err := root.MkdirAll(d, 0o755); err != nil {
					return err
				}
			}
			w, err := root.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
			if err != nil {
				return err
			}
			_, err = io.Copy(w, tr)
			if cerr := w.Close(); err == nil {
				err = cerr
			}
			if err != nil {
				return err
			}
		}
	}
}

// layers lists img's layers with their digests, sizes and diff IDs, refusing
// media types that cannot be unpacked.
func layers(img v1.Image) ([]v1.Layer, error) {
	ls, err := img.Layers()
	if err != nil {
		return nil, err
	}
	for _, l := range ls {
		mt, err := l.MediaType()
		if err != nil {
			return nil, err
		}
		switch mt {
		case types.DockerLayer, types.DockerUncompressedLayer, types.OCILayer, types.OCILayerZStd,
			types.OCIUncompressedLayer:
		default:
			d, _ := l.Digest()
			return nil, fmt.Errorf("%w: layer %s is %s", ErrUnsupportedMediaType, d, mt)
		}
	}
	return ls, nil
}
