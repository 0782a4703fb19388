// Package image owns OCI images as dryexec uses them: parsing a reference
// (a registry name, digest-pinned or tagged; an OCI layout directory; a
// `docker save` or OCI tarball), fetching it through go-containerregistry for
// one platform, and the content-addressed cache under $DRYEXEC_HOME/images in
// which every layer is unpacked once, safely, into its own overlay-ready
// directory (docs/images.md).
package image

import (
	"errors"
	"fmt"
	"runtime"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// The errors a pull can end with; each is wrapped with the detail, so test
// with errors.Is. A refusal by the registry also carries *RegistryError.
var (
	// ErrBadReference: the reference cannot be parsed.
	ErrBadReference = errors.New("image: bad reference")
	// ErrNotFound: no such image (repository, tag, digest or file).
	ErrNotFound = errors.New("image: not found")
	// ErrBadDigest: a digest is malformed, or content does not hash to the
	// digest that names it.
	ErrBadDigest = errors.New("image: digest mismatch or malformed digest")
	// ErrUnsupportedMediaType: a manifest or layer of a kind dryexec cannot
	// unpack (schema 1, foreign layers, artifacts that are not images).
	ErrUnsupportedMediaType = errors.New("image: unsupported media type")
	// ErrUnauthorized: the registry refused the credentials, or wanted some
	// and none were configured.
	ErrUnauthorized = errors.New("image: registry refused access")
	// ErrPlatformNotFound: the image is not built for the platform asked for.
	ErrPlatformNotFound = errors.New("image: platform not in image")
	// ErrUnsafeLayer: a layer's tar tries to reach outside its directory
	// (`..`, a write through a symlink, a hardlink to outside) or is not a
	// well-formed tar.
	ErrUnsafeLayer = errors.New("image: unsafe or malformed layer")
	// ErrUnsupportedHost: unpacking needs Linux (openat2); a cache unpacked
	// in one Form is refused to a caller that mounts the other.
	ErrUnsupportedHost = errors.New("image: this host cannot unpack images")
)

// Form is how a cache's layers mark what overlayfs must hide, which decides
// who can mount them (docs/images.md, "Rootless"). Whiteouts are 0/0
// character devices in both.
type Form string

const (
	// FormRoot: opaque directories carry trusted.overlay.opaque, and files
	// keep the image's owners. Only an overlay mounted by root honours it.
	FormRoot Form = "root"
	// FormUserXattr: opaque directories carry user.overlay.opaque, and
	// every file is the caller's; for an overlay mounted with userxattr in
	// a user namespace, by a caller that is not root.
	FormUserXattr Form = "userxattr"
)

// RegistryError is the registry's own answer to a refused request, kept for
// errors.As: its HTTP status and error codes.
type RegistryError struct {
	Status int
	Codes  []string
	Err    error
}

func (e *RegistryError) Error() string { return e.Err.Error() }
func (e *RegistryError) Unwrap() error { return e.Err }

// PlatformError says which platform was wanted and which the image offers.
type PlatformError struct {
	Want      string
	Available []string
}

func (e *PlatformError) Error() string {
	return fmt.Sprintf("image: no %s image (the index has: %s)", e.Want, strings.Join(e.Available, ", "))
}

func (e *PlatformError) Is(target error) bool { return target == ErrPlatformNotFound }

// Kind is where an image comes from.
type Kind string

const (
	FromRegistry      Kind = "registry"       // name[:tag][@digest]
	FromOCILayout     Kind = "oci"            // oci:DIR[:tag|@digest]
	FromDockerArchive Kind = "docker-archive" // docker-archive:FILE[:repo:tag]
	FromOCIArchive    Kind = "oci-archive"    // oci-archive:FILE[:tag|@digest]
)

// Ref is a parsed image reference. The prefixes follow skopeo's transport
// names, which people already know.
type Ref struct {
	Kind Kind
	// Name is the registry reference, or the path of the layout or archive.
	Name string
	// Tag selects within a layout or archive (its org.opencontainers.image.ref.name
	// annotation, or a docker-archive RepoTag); Digest pins a manifest.
	Tag, Digest string
}

func (r Ref) String() string {
	if r.Kind == FromRegistry {
		return r.Name
	}
	s := string(r.Kind) + ":" + r.Name
	if r.Tag != "" {
		s += ":" + r.Tag
	}
	if r.Digest != "" {
		s += "@" + r.Digest
	}
	return s
}

// ParseRef parses s: a registry reference as docker takes it, or one of
// oci:DIR, oci-archive:FILE, docker-archive:FILE, each optionally followed by
// :TAG or @DIGEST (so the path itself cannot hold a colon or an @).
func ParseRef(s string) (Ref, error) {
	for _, k := range []Kind{FromOCILayout, FromOCIArchive, FromDockerArchive} {
		rest, ok := strings.CutPrefix(s, string(k)+":")
		if !ok {
			continue
		}
		r := Ref{Kind: k, Name: rest}
		if p, d, ok := strings.Cut(rest, "@"); ok {
			if _, err := v1.NewHash(d); err != nil {
				return Ref{}, fmt.Errorf("%w: %s: %w", ErrBadDigest, s, err)
			}
			r.Name, r.Digest = p, d
		} else if p, tag, ok := strings.Cut(rest, ":"); ok {
			// The first colon starts the tag, as in skopeo (a docker-archive
			// tag is repo:tag itself), so the path cannot hold one.
			r.Name, r.Tag = p, tag
		}
		if r.Name == "" {
			return Ref{}, fmt.Errorf("%w: %q names no path", ErrBadReference, s)
		}
		return r, nil
	}
	if s == "" {
		return Ref{}, fmt.Errorf("%w: empty", ErrBadReference)
	}
	if _, d, ok := strings.Cut(s, "@"); ok {
		if _, err := v1.NewHash(d); err != nil {
			return Ref{}, fmt.Errorf("%w: %s: %w", ErrBadDigest, s, err)
		}
	}
	return Ref{Kind: FromRegistry, Name: s}, nil
}

// DefaultPlatform is linux on the host's architecture: what a sandbox on this
// machine can run.
func DefaultPlatform() v1.Platform {
	// No variant: an index's arm64 entry may or may not name v8, and an
	// empty field matches either.
	return v1.Platform{OS: "linux", Architecture: runtime.GOARCH}
}

// canonicalName spells a registry reference in full, as the cache records it.
func canonicalName(s string) string {
	r, err := name.ParseReference(s)
	if err != nil {
		return s
	}
	return r.Name()
}
