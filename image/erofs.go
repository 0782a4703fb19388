package image

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ErrNoMkfsErofs: mkfs.erofs (Debian's erofs-utils, which `make deps`
// installs) is not on PATH, so an image cannot be packed for the vm rung.
var ErrNoMkfsErofs = errors.New("image: mkfs.erofs not found (install erofs-utils)")

// Erofs returns img's root filesystem packed as one erofs image, building it
// on first use from view, the image's merged read-only view (a directory:
// linuxns.ImageView's, whose overlay has already applied the whiteouts and
// opaque dirs, so the erofs image holds none). The vm rung attaches it to a
// VM as a read-only disk.
//
// It is cached by the image's manifest digest, as erofs/<hex>.erofs in the
// cache: built in tmp/ and renamed into place, under a lock of its own, so
// that concurrent first uses build it once and no reader sees it half
// written. built says whether this call built it. The caller holds the image
// (Use or Ensure), so that prune does not remove it meanwhile.
func (c *Cache) Erofs(ctx context.Context, img Image, view *os.File) (path string, built bool, err error) {
	return erofsIn(ctx, c.dir, img.Digest, view, oneLayer(c.LayerDirs(img)))
}

// ErofsOf is Cache.Erofs for a sandbox's image (dryexec.ImageRoot): the
// cache is the one its layer directories are in (layers/<hex> beneath it).
func ErofsOf(ctx context.Context, digest string, layers []string, view *os.File) (string, bool, error) {
	if len(layers) == 0 {
		return "", false, fmt.Errorf("%w: an image without layers has no cache to pack it in", ErrBadReference)
	}
	dir := filepath.Dir(filepath.Dir(layers[0]))
	if filepath.Base(filepath.Dir(layers[0])) != "layers" {
		return "", false, fmt.Errorf("image: %s is not a layer of an image cache", layers[0])
	}
	return erofsIn(ctx, dir, digest, view, oneLayer(layers))
}

// oneLayer is the layer of an image of one layer, else "": that layer is
// its own merged view, a directory of the cache, packed from its path. Its
// view is a clone of it (imagemount.Overlay), which the kernel refuses to
// clone again (EINVAL) for mkfsErofs's namespace.
func oneLayer(layers []string) string {
	if len(layers) == 1 {
		return layers[0]
	}
	return ""
}

// erofsIn packs view, or the directory src when set, into dir's erofs/.
func erofsIn(ctx context.Context, dir, digest string, view *os.File, src string) (string, bool, error) {
	algo, hx, ok := strings.Cut(digest, ":")
	if !ok || algo != "sha256" || len(hx) != 64 || strings.Trim(hx, "0123456789abcdef") != "" {
		return "", false, fmt.Errorf("%w: %q", ErrBadDigest, digest)
	}
	out := filepath.Join(dir, "erofs", hx+".erofs")
	if _, err := os.Stat(out); err == nil {
		return out, false, nil
	}
	mkfs, err := exec.LookPath("mkfs.erofs")
	if err != nil {
		return "", false, fmt.Errorf("%w: %w", ErrNoMkfsErofs, err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "erofs"), 0o700); err != nil {
		return "", false, fmt.Errorf("image: erofs: %w", err)
	}
	lk, err := flock(ctx, filepath.Join(dir, "locks", "erofs-"+hx+".lock"), true)
	if err != nil {
		return "", false, err
	}
	defer lk.Close()
	// Built by a concurrent first use while this one waited for the lock.
	if _, err := os.Stat(out); err == nil {
		return out, false, nil
	}
	tmp, err := os.CreateTemp(filepath.Join(dir, "tmp"), "erofs-")
	if err != nil {
		return "", false, fmt.Errorf("image: erofs: %w", err)
	}
	tmp.Close()
	defer os.Remove(tmp.Name())
	pack := func() error { return mkfsErofs(ctx, mkfs, dir, tmp.Name(), view) }
	if src != "" {
		pack = func() error { return runMkfs(ctx, mkfs, tmp.Name(), src) }
	}
	if err := pack(); err != nil {
		if ctx.Err() != nil {
			return "", false, ctx.Err()
		}
		return "", false, fmt.Errorf("image: mkfs.erofs of %s: %w", digest, err)
	}
	if err := os.Chmod(tmp.Name(), 0o600); err != nil {
		return "", false, fmt.Errorf("image: erofs: %w", err)
	}
	// The rename is the commit: an erofs image exists whole or not at all.
	if err := os.Rename(tmp.Name(), out); err != nil {
		return "", false, fmt.Errorf("image: erofs: %w", err)
	}
	return out, true, nil
}

// pruneErofs removes the erofs images of images no longer recorded (under
// gc.lock held exclusive: nothing is using them).
func (c *Cache) pruneErofs(keep map[string]bool) (int, int64, error) {
	ents, err := os.ReadDir(filepath.Join(c.dir, "erofs"))
	if errors.Is(err, fs.ErrNotExist) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, err
	}
	var n int
	var size int64
	for _, e := range ents {
		hx := strings.TrimSuffix(e.Name(), ".erofs")
		if keep[hx] {
			continue
		}
		p := filepath.Join(c.dir, "erofs", e.Name())
		if info, err := e.Info(); err == nil {
			size += info.Size()
		}
		if err := os.Remove(p); err != nil {
			return n, size, err
		}
		os.Remove(filepath.Join(c.dir, "locks", "erofs-"+hx+".lock"))
		n++
	}
	return n, size, nil
}

// runMkfs runs mkfs.erofs on the directory src into out. Times are kept per
// file (--preserve-mtime): a trial's walk compares them with what the VM
// leaves, as on ns. xattrs are kept (-x2, the default, spelled out); owners,
// modes, setuid bits, device nodes, symlinks and hard links are erofs's own.
func runMkfs(ctx context.Context, mkfs, out, src string) error {
	cmd := exec.CommandContext(ctx, mkfs, "--quiet", "--preserve-mtime", "-x2", out, src)
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%w: %s", err, strings.TrimSpace(stderr.String()))
	}
	return nil
}
