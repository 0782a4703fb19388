package dryexec

import (
	"fmt"
	"path"
	"strings"
)

// ImageRoot is an OCI image's root filesystem as a sandbox's read-only lower
// layer, in place of the host's (docs/images.md). The caller resolves the
// reference through the image cache (package image) and keeps the layers in
// use (image.Cache.Use) until the sandbox is gone.
type ImageRoot struct {
	// Ref is the reference as the caller gave it; Digest the manifest's.
	Ref    string
	Digest string
	// Layers are the unpacked layer directories, lowest first
	// (image.Cache.LayerDirs): an overlayfs lower stack.
	Layers []string
	// Env and WorkingDir are the image config's; the caller folds them into
	// the action (ImageAction) before the rung sees it.
	Env        []string
	WorkingDir string
	// UserXattr: the layers are in the form an overlay mounted with
	// userxattr in a user namespace honours (opaque dirs as
	// user.overlay.opaque, every file the caller's): a cache pulled by a
	// caller that is not root (image.FormUserXattr). A rung mounts them
	// only so, and root's layers only as root.
	UserXattr bool
}

// MaxImageLayers is the most layers an image sandbox stacks: overlayfs's own
// limit on lower layers (OVL_MAX_STACK). A deeper image is refused with
// ErrTooManyLayers rather than mounted partly.
const MaxImageLayers = 500

// ImageRung is a rung that can start a sandbox from an ImageRoot
// (TrialSpec.Image, SandboxSpec.Image). A rung without it refuses an image
// with an *IsolationUnavailableError naming itself (CheckImage).
type ImageRung interface {
	SupportsImages() bool
}

// CheckImage says whether r can run a sandbox on img: nil when img is nil or
// r is an ImageRung, else an *IsolationUnavailableError naming r; and
// ErrTooManyLayers for an image deeper than MaxImageLayers.
func CheckImage(r Rung, img *ImageRoot) error {
	if img == nil {
		return nil
	}
	if ir, ok := r.(ImageRung); !ok || !ir.SupportsImages() {
		return &IsolationUnavailableError{Rung: r.Name(), Missing: "sandboxes from an image (--image) are not supported on " + r.Name() + " yet (use --rung ns)"}
	}
	if len(img.Layers) > MaxImageLayers {
		return &TooManyLayersError{Ref: img.Ref, Layers: len(img.Layers)}
	}
	return nil
}

// TooManyLayersError: the image has more layers than overlayfs stacks.
type TooManyLayersError struct {
	Ref    string
	Layers int
}

func (e *TooManyLayersError) Error() string {
	return fmt.Sprintf("image %s has %d layers; overlayfs stacks at most %d (flatten the image)", e.Ref, e.Layers, MaxImageLayers)
}

// Is makes errors.Is(err, ErrTooManyLayers) true.
func (e *TooManyLayersError) Is(target error) bool { return target == ErrTooManyLayers }

// ImageAction folds img's config into a: the image's Env under the caller's
// (the caller's value wins for a name both set), and, when a.Cwd is empty,
// the image's WorkingDir, else "/".
func ImageAction(a Action, img *ImageRoot) Action {
	if img == nil {
		return a
	}
	env := make(map[string]string, len(img.Env)+len(a.Env))
	for _, kv := range img.Env {
		if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
			env[k] = v
		}
	}
	for k, v := range a.Env {
		env[k] = v
	}
	a.Env = env
	if a.Cwd == "" {
		a.Cwd = img.WorkingDir
		if a.Cwd == "" || !path.IsAbs(a.Cwd) {
			a.Cwd = path.Join("/", a.Cwd)
		}
	}
	return a
}

// DeltaImage says a delta is over an image, not the host: its paths are the
// image's, and commit applies them only beneath Workspace, mapped onto a host
// directory the caller names (docs/images.md, "Commit").
type DeltaImage struct {
	Ref    string `json:"ref"`
	Digest string `json:"digest"`
	// Workspace is the directory of the image whose changes commit may map
	// onto a host directory: the action's cwd.
	Workspace string `json:"workspace"`
}

// ImageCallerEnv is SandboxEnv for a sandbox on an image: only what names
// and set name. The host's default allowlist (PATH, HOME,
// …) is not passed: the image's own Env (ImageAction puts the caller's
// on top of it) knows where the image keeps its programs, and the
// host's PATH would hide them (docs/images.md, "Environment").
func ImageCallerEnv(getenv func(string) string, environ, pass, set []string) (map[string]string, error) {
	all, err := SandboxEnv(getenv, environ, pass, set)
	if err != nil {
		return nil, err
	}
	named := func(k string) bool {
		for _, p := range pass {
			if p == k || strings.HasSuffix(p, "*") && strings.HasPrefix(k, strings.TrimSuffix(p, "*")) {
				return true
			}
		}
		for _, kv := range set {
			if n, _, _ := strings.Cut(kv, "="); n == k {
				return true
			}
		}
		return false
	}
	for k := range all {
		if !named(k) {
			delete(all, k)
		}
	}
	return all, nil
}
