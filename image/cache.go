package image

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"

	"github.com/dryexec/dryexec"
)

// Cache is the image cache in one directory (by default $DRYEXEC_HOME/images):
//
//	gc.lock            shared by every pull, exclusive for rm, prune and the
//	                   sweep of tmp/: nothing is removed under a pull
//	meta.lock          exclusive around each read-modify-write of a record
//	layers/<hex>/      one unpacked layer, named by its diff ID (the digest of
//	                   its uncompressed tar), overlay-ready; present = complete
//	locks/<hex>.lock   held while that layer is fetched and unpacked
//	images/<hex>.json  one image, by manifest digest: its names, platform and
//	                   layers (diff IDs, lowest first)
//	tmp/               work in progress; renamed into layers/ when complete
//	erofs/<hex>.erofs  one image's merged root packed for the vm rung, by
//	                   manifest digest, built on first use (Erofs)
//	form               the cache's Form, written once when it is made
type Cache struct {
	dir  string
	form Form
	log  *slog.Logger
}

// Image is a pulled image as the cache records it.
type Image struct {
	Digest   string    `json:"digest"` // of the manifest
	Names    []string  `json:"names"`
	Platform string    `json:"platform"` // the config's, else the one pulled for
	Layers   []string  `json:"layers"`   // diff IDs, lowest first
	Size     int64     `json:"size"`     // compressed bytes, as pulled
	Config   string    `json:"config"`   // digest of the config blob
	Pulled   time.Time `json:"pulled"`
	// Env and WorkingDir are the config's: a sandbox on the image starts
	// with them (dryexec.ImageAction). Records of an older dryexec lack
	// them: Ensure pulls such an image again.
	Env        []string `json:"env,omitempty"`
	WorkingDir string   `json:"working_dir,omitempty"`
	HasConfig  bool     `json:"has_config,omitempty"`
}

// Progress is a pull's state, reported as bytes arrive.
type Progress struct {
	Layer       int   // index of the layer being fetched
	Layers      int   // how many the image has
	Done, Total int64 // compressed bytes, over every layer still to fetch
}

// PullOptions are a pull's choices; the zero value pulls for DefaultPlatform
// with the docker config's credentials.
type PullOptions struct {
	Platform *v1.Platform
	// Keychain resolves registry credentials; nil is authn.DefaultKeychain
	// ($DOCKER_CONFIG or ~/.docker/config.json, with credential helpers).
	Keychain authn.Keychain
	// Progress, if set, is called as bytes arrive, from the pulling goroutine.
	Progress func(Progress)
}

// PullResult is what a pull did.
type PullResult struct {
	Image
	// Unpacked counts the layers this pull fetched and unpacked itself; the
	// rest were in the cache or unpacked meanwhile by a concurrent pull.
	Unpacked int
	// Skipped counts entries not created (device nodes): docs/images.md.
	Skipped int
}

// Open opens (creating, 0700) the cache in dir and removes what crashed pulls
// left in tmp/, unless a pull is running.
func Open(dir string, log *slog.Logger) (*Cache, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for _, d := range []string{"", "layers", "locks", "images", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, fmt.Errorf("image: cache: %w", err)
		}
	}
	// 0700 even if it existed: setuid files live in here.
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("image: cache: %w", err)
	}
	form, err := cacheForm(dir, callerForm())
	if err != nil {
		return nil, err
	}
	if want := callerForm(); form != want {
		return nil, fmt.Errorf("%w: the image cache %s holds layers in the %s form, and this caller (uid %d) mounts the %s form: "+
			"root and other users each keep their own cache (their own DRYEXEC_HOME)", ErrUnsupportedHost, dir, form, os.Geteuid(), want)
	}
	c := &Cache{dir: dir, form: form, log: log}
	if _, err := c.sweepTmp(); err != nil {
		return nil, err
	}
	return c, nil
}

// cacheForm reads the Form of the cache in dir, marking a new cache with
// want. The mark is made by link(2), which never replaces one that a
// concurrent Open made first. A cache of an older dryexec has no mark: it
// was unpacked as root, the only way there was, unless it holds no layer.
func cacheForm(dir string, want Form) (Form, error) {
	p := filepath.Join(dir, "form")
	for {
		b, err := os.ReadFile(p)
		if err == nil {
			f := Form(strings.TrimSpace(string(b)))
			if f != FormRoot && f != FormUserXattr {
				return "", fmt.Errorf("image: cache: %s names no form (%q)", p, b)
			}
			return f, nil
		}
		if !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("image: cache: %w", err)
		}
		if ents, err := os.ReadDir(filepath.Join(dir, "layers")); err == nil && len(ents) > 0 {
			want = FormRoot
		}
		tmp, err := os.CreateTemp(filepath.Join(dir, "tmp"), "form-")
		if err != nil {
			return "", fmt.Errorf("image: cache: %w", err)
		}
		_, err = tmp.WriteString(string(want) + "\n")
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Link(tmp.Name(), p)
		}
		os.Remove(tmp.Name())
		// ErrNotExist: a concurrent Open swept tmp/ meanwhile; try again.
		if err != nil && !errors.Is(err, fs.ErrExist) && !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("image: cache: %w", err)
		}
		// Made, by this Open or a concurrent one: read what it says.
	}
}

// Dir is the cache's directory.
func (c *Cache) Dir() string { return c.dir }

// Form is how the cache's layers are unpacked, and so who may mount them.
func (c *Cache) Form() Form { return c.form }

// sweepTmp removes tmp/'s content when no pull holds gc.lock, and reports how
// many entries went.
func (c *Cache) sweepTmp() (int, error) {
	l, err := tryFlock(filepath.Join(c.dir, "gc.lock"))
	if err != nil || l == nil {
		return 0, err
	}
	defer l.Close()
	return c.clearTmp()
}

func (c *Cache) clearTmp() (int, error) {
	ents, err := os.ReadDir(filepath.Join(c.dir, "tmp"))
	if err != nil {
		return 0, err
	}
	for _, e := range ents {
		if err := removeAll(filepath.Join(c.dir, "tmp", e.Name())); err != nil {
			return 0, err
		}
	}
	return len(ents), nil
}

// LayerDirs are img's unpacked layers, lowest first: an overlayfs lowerdir
// stack takes them in the reverse order.
func (c *Cache) LayerDirs(img Image) []string {
	out := make([]string, len(img.Layers))
	for i, l := range img.Layers {
		out[i] = c.layerDir(l)
	}
	return out
}

func (c *Cache) layerDir(diffID string) string {
	_, hx, _ := strings.Cut(diffID, ":")
	return filepath.Join(c.dir, "layers", hx)
}

// Pull fetches ref for the platform and unpacks each layer the cache does not
// hold yet. Concurrent pulls of the same layer, in this process or others,
// unpack it once: the later ones wait for the first and use its work.
func (c *Cache) Pull(ctx context.Context, ref string, opts PullOptions) (*PullResult, error) {
	r, err := ParseRef(ref)
	if err != nil {
		return nil, err
	}
	if err := canUnpack(); err != nil {
		return nil, err
	}
	plat := DefaultPlatform()
	if opts.Platform != nil {
		plat = *opts.Platform
	}
	gc, err := flock(ctx, filepath.Join(c.dir, "gc.lock"), false)
	if err != nil {
		return nil, err
	}
	defer gc.Close()
	src, err := open(ctx, r, plat, opts.Keychain, filepath.Join(c.dir, "tmp"))
	if err != nil {
		return nil, err
	}
	if src.cleanup != nil {
		defer src.cleanup()
	}
	ls, err := layers(src.img)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r, err)
	}
	cfg, err := src.img.ConfigName()
	if err != nil {
		return nil, registryErr(r.String(), err)
	}
	res := &PullResult{Image: Image{Digest: src.digest.String(), Platform: src.platform, Config: cfg.String(), HasConfig: true}}
	cf, err := src.img.ConfigFile()
	if err != nil {
		return nil, registryErr(r.String(), err)
	}
	res.Env, res.WorkingDir = cf.Config.Env, cf.Config.WorkingDir
	var total int64
	var todo []bool
	for _, l := range ls {
		id, err := l.DiffID()
		if err != nil {
			return nil, registryErr(r.String(), err)
		}
		sz, err := l.Size()
		if err != nil {
			return nil, registryErr(r.String(), err)
		}
		res.Layers = append(res.Layers, id.String())
		res.Size += sz
		_, err = os.Lstat(c.layerDir(id.String()))
		todo = append(todo, err != nil)
		if err != nil {
			total += sz
		}
	}
	pr := &progress{fn: opts.Progress, p: Progress{Layers: len(ls), Total: total}}
	for i, l := range ls {
		if !todo[i] {
			continue
		}
		pr.p.Layer = i
		n, did, err := c.ensureLayer(ctx, l, res.Layers[i], pr)
		if err != nil {
			return nil, fmt.Errorf("%s: layer %d: %w", r, i, err)
		}
		res.Skipped += n
		if did {
			res.Unpacked++
		}
	}
	name := r.String()
	if r.Kind == FromRegistry {
		// Names are stored as go-containerregistry spells them in full, so
		// that "alpine" and "index.docker.io/library/alpine:latest" are one.
		name = canonicalName(r.Name)
	}
	if err := c.record(ctx, &res.Image, name); err != nil {
		return nil, err
	}
	return res, nil
}

// ensureLayer makes layers/<hex> exist, unpacking l under the layer's lock
// unless someone else has meanwhile. It says how many entries were skipped
// and whether it unpacked.
func (c *Cache) ensureLayer(ctx context.Context, l v1.Layer, diffID string, pr *progress) (int, bool, error) {
	dst := c.layerDir(diffID)
	lk, err := flock(ctx, filepath.Join(c.dir, "locks", filepath.Base(dst)+".lock"), true)
	if err != nil {
		return 0, false, err
	}
	defer lk.Close()
	if _, err := os.Lstat(dst); err == nil {
		return 0, false, nil
	}
	tmp, err := os.MkdirTemp(filepath.Join(c.dir, "tmp"), "layer-")
	if err != nil {
		return 0, false, err
	}
	done := false
	defer func() {
		if !done {
			removeAll(tmp)
		}
	}()
	if err := os.Chmod(tmp, 0o755); err != nil {
		return 0, false, err
	}
	skipped, err := c.unpack(ctx, l, diffID, tmp, pr)
	if err != nil {
		return 0, false, err
	}
	// The rename is the commit: a layer directory exists whole or not at all.
	if err := os.Rename(tmp, dst); err != nil {
		return 0, false, err
	}
	done = true
	return skipped, true, nil
}

// unpack fetches l, checks both of its digests, and unpacks it into dir.
func (c *Cache) unpack(ctx context.Context, l v1.Layer, diffID, dir string, pr *progress) (int, error) {
	rc, err := l.Compressed()
	if err != nil {
		return 0, registryErr("layer", err)
	}
	defer rc.Close()
	want, err := l.Digest()
	if err != nil {
		return 0, err
	}
	zh := sha256.New()
	br := bufio.NewReaderSize(io.TeeReader(&countingReader{r: rc, pr: pr, ctx: ctx}, zh), 1<<20)
	// A blob that is not what its digest says is the cause of whatever
	// else fails on it (a broken gzip stream, a torn tar): say so.
	blame := func(err error) error {
		if cerr := ctx.Err(); cerr != nil {
			return cerr
		}
		if _, cerr := io.Copy(io.Discard, br); cerr == nil {
			if serr := checkSum(zh, want.String(), "layer"); serr != nil {
				return serr
			}
		}
		return err
	}
	plain, err := decompress(br)
	if err != nil {
		return 0, blame(fmt.Errorf("%w: %w", ErrUnsafeLayer, err))
	}
	// Reading, both digests and decompression run in a goroutine of their
	// own, the unpacker's writes in this one, as `tar -xz` runs gzip in a
	// process of its own: one after the other, the layer took the sum of
	// both (about a third of tar -xzf's rate on two CPUs; docs/images.md,
	// "Performance").
	uh := sha256.New()
	pipeR, pipeW := io.Pipe()
	fed := make(chan error, 1)
	go func() {
		// The tar ends before its stream does (padding, the compressor's
		// trailer): both digests cover every byte.
		_, err := io.Copy(pipeW, io.TeeReader(plain, uh))
		if err != nil {
			err = fmt.Errorf("%w: %w", ErrUnsafeLayer, err)
		} else if _, err = io.Copy(io.Discard, br); err != nil {
			err = fmt.Errorf("reading the layer: %w", err)
		}
		pipeW.CloseWithError(err)
		fed <- err
	}()
	skipped, err := unpackLayer(ctx, pipeR, dir, c.form, c.log)
	if err == nil {
		_, err = io.Copy(io.Discard, pipeR)
	}
	// The feeder stops at the pipe's end whatever happened here; blame
	// reads br only after it has.
	pipeR.CloseWithError(err)
	ferr := <-fed
	if err != nil {
		return 0, blame(err)
	}
	if ferr != nil {
		return 0, ferr
	}
	if err := checkSum(zh, want.String(), "layer"); err != nil {
		return 0, err
	}
	if err := checkSum(uh, diffID, "uncompressed layer"); err != nil {
		return 0, err
	}
	return skipped, nil
}

func checkSum(h hash.Hash, want, what string) error {
	if got := "sha256:" + hex.EncodeToString(h.Sum(nil)); got != want {
		return fmt.Errorf("%w: %s is %s, the manifest says %s", ErrBadDigest, what, got, want)
	}
	return nil
}

// decompress sniffs the stream's compression rather than trusting the media
// type: `docker save` tarballs call uncompressed layers gzip.
func decompress(br *bufio.Reader) (io.Reader, error) {
	head, _ := br.Peek(4)
	switch {
	case bytes.HasPrefix(head, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, err
		}
		zr.Multistream(true)
		return zr, nil
	case bytes.HasPrefix(head, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		zr, err := zstd.NewReader(br)
		if err != nil {
			return nil, err
		}
		return zr.IOReadCloser(), nil
	}
	return br, nil
}

type progress struct {
	fn func(Progress)
	p  Progress
}

type countingReader struct {
	r   io.Reader
	pr  *progress
	ctx context.Context
}

func (c *countingReader) Read(b []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := c.r.Read(b)
	if n > 0 && c.pr.fn != nil {
		c.pr.p.Done += int64(n)
		c.pr.fn(c.pr.p)
	}
	return n, err
}

// record adds name to the image's record, writing it atomically.
func (c *Cache) record(ctx context.Context, img *Image, name string) error {
	ml, err := flock(ctx, filepath.Join(c.dir, "meta.lock"), true)
	if err != nil {
		return err
	}
	defer ml.Close()
	// A name points at one image: pulling a tag again moves it.
	all, err := c.readAll()
	if err != nil {
		return err
	}
	for _, o := range all {
		if o.Digest == img.Digest || !slices.Contains(o.Names, name) {
			continue
		}
		o.Names = slices.DeleteFunc(o.Names, func(n string) bool { return n == name })
		if err := c.write(o); err != nil {
			return err
		}
	}
	if old, err := c.read(img.Digest); err == nil {
		img.Names = old.Names
	}
	if !slices.Contains(img.Names, name) {
		img.Names = append(img.Names, name)
	}
	img.Pulled = time.Now().UTC()
	return c.write(*img)
}

func (c *Cache) recordPath(digest string) string {
	_, hx, _ := strings.Cut(digest, ":")
	return filepath.Join(c.dir, "images", hx+".json")
}

func (c *Cache) read(digest string) (Image, error) {
	var img Image
	b, err := os.ReadFile(c.recordPath(digest))
	if err != nil {
		return img, err
	}
	err = json.Unmarshal(b, &img)
	return img, err
}

func (c *Cache) write(img Image) error {
	b, err := json.MarshalIndent(img, "", "  ")
	if err != nil {
		return err
	}
	f, err := os.CreateTemp(filepath.Join(c.dir, "tmp"), "record-")
	if err != nil {
		return err
	}
	_, err = f.Write(b)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), c.recordPath(img.Digest))
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}

func (c *Cache) readAll() ([]Image, error) {
	ents, err := os.ReadDir(filepath.Join(c.dir, "images"))
	if err != nil {
		return nil, err
	}
	var out []Image
	for _, e := range ents {
		hx, ok := strings.CutSuffix(e.Name(), ".json")
		if !ok {
			continue
		}
		img, err := c.read("sha256:" + hx)
		if err != nil {
			return nil, fmt.Errorf("image: record %s: %w", e.Name(), err)
		}
		out = append(out, img)
	}
	return out, nil
}

// List returns the cached images, most recently pulled first.
func (c *Cache) List() ([]Image, error) {
	all, err := c.readAll()
	slices.SortFunc(all, func(a, b Image) int { return b.Pulled.Compare(a.Pulled) })
	return all, err
}

// Lookup finds a cached image by name (as pulled) or digest (or a prefix of
// its hex of at least 12 characters).
func (c *Cache) Lookup(ref string) (Image, error) {
	all, err := c.readAll()
	if err != nil {
		return Image{}, err
	}
	canon := ref
	if r, err := ParseRef(ref); err == nil && r.Kind == FromRegistry {
		canon = canonicalName(r.Name)
	}
	var hits []Image
	for _, img := range all {
		hx := strings.TrimPrefix(img.Digest, "sha256:")
		switch {
		case slices.Contains(img.Names, ref), slices.Contains(img.Names, canon), img.Digest == ref,
			len(strings.TrimPrefix(ref, "sha256:")) >= 12 && strings.HasPrefix(hx, strings.TrimPrefix(ref, "sha256:")):
			hits = append(hits, img)
		}
	}
	switch len(hits) {
	case 0:
		return Image{}, fmt.Errorf("%w: %s is not in the cache", ErrNotFound, ref)
	case 1:
		return hits[0], nil
	}
	return Image{}, fmt.Errorf("%w: %s names %d cached images", ErrBadReference, ref, len(hits))
}

// Remove drops ref: the name alone when the image has others and ref is a
// name, else the whole image and the layers no other image uses.
func (c *Cache) Remove(ctx context.Context, ref string) (Image, error) {
	gc, err := flock(ctx, filepath.Join(c.dir, "gc.lock"), true)
	if err != nil {
		return Image{}, err
	}
	defer gc.Close()
	img, err := c.Lookup(ref)
	if err != nil {
		return Image{}, err
	}
	canon := ref
	if r, err := ParseRef(ref); err == nil && r.Kind == FromRegistry {
		canon = canonicalName(r.Name)
	}
	if n := slices.DeleteFunc(slices.Clone(img.Names), func(s string) bool { return s == ref || s == canon }); len(n) > 0 && len(n) < len(img.Names) {
		img.Names = n
		return img, c.write(img)
	}
	if err := os.Remove(c.recordPath(img.Digest)); err != nil {
		return Image{}, err
	}
	_, err = c.pruneLocked()
	return img, err
}

// PruneReport says what Prune removed.
type PruneReport struct {
	Layers int   // unpacked layers no image uses
	Bytes  int64 // their size on disk
	Tmp    int   // leftovers of interrupted pulls
	Erofs  int   // erofs images (the vm rung's) of images no longer held
}

// Prune removes layers no recorded image uses and what interrupted pulls
// left. It waits for running pulls.
func (c *Cache) Prune(ctx context.Context) (PruneReport, error) {
	gc, err := flock(ctx, filepath.Join(c.dir, "gc.lock"), true)
	if err != nil {
		return PruneReport{}, err
	}
	defer gc.Close()
	return c.pruneLocked()
}

func (c *Cache) pruneLocked() (PruneReport, error) {
	var rep PruneReport
	n, err := c.clearTmp()
	if err != nil {
		return rep, err
	}
	rep.Tmp = n
	all, err := c.readAll()
	if err != nil {
		return rep, err
	}
	used, images := map[string]bool{}, map[string]bool{}
	for _, img := range all {
		_, hx, _ := strings.Cut(img.Digest, ":")
		images[hx] = true
		for _, l := range img.Layers {
			used[filepath.Base(c.layerDir(l))] = true
		}
	}
	ents, err := os.ReadDir(filepath.Join(c.dir, "layers"))
	if err != nil {
		return rep, err
	}
	for _, e := range ents {
		if used[e.Name()] {
			continue
		}
		p := filepath.Join(c.dir, "layers", e.Name())
		sz := diskUsage(p)
		// Renamed out first, so that a crash mid-removal leaves no layer
		// that looks complete and is not.
		gone := filepath.Join(c.dir, "tmp", "rm-"+e.Name())
		if err := os.Rename(p, gone); err != nil {
			return rep, err
		}
		if err := removeAll(gone); err != nil {
			return rep, err
		}
		os.Remove(filepath.Join(c.dir, "locks", e.Name()+".lock"))
		rep.Layers++
		rep.Bytes += sz
	}
	n, sz, err := c.pruneErofs(images)
	rep.Erofs, rep.Bytes = n, rep.Bytes+sz
	return rep, err
}

// DiskUsage is the bytes img's layers take in the cache (shared layers count
// in full for each image).
func (c *Cache) DiskUsage(img Image) int64 {
	var n int64
	for _, d := range c.LayerDirs(img) {
		n += diskUsage(d)
	}
	return n
}

func diskUsage(root string) int64 {
	var n int64
	filepath.WalkDir(root, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if info, err := d.Info(); err == nil && info.Mode().IsRegular() {
			n += info.Size()
		}
		return nil
	})
	return n
}

// removeAll removes p, making directories writable first where an image
// made them read-only (which stops a non-root removal).
func removeAll(p string) error {
	err := os.RemoveAll(p)
	if err == nil || !errors.Is(err, fs.ErrPermission) {
		return err
	}
	filepath.WalkDir(p, func(q string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(q, 0o700)
		}
		return nil
	})
	return os.RemoveAll(p)
}

// Use finds ref in the cache and holds gc.lock shared until release is
// called, so that rm and prune wait rather than remove a layer a sandbox is
// mounting. It never pulls.
func (c *Cache) Use(ctx context.Context, ref string) (img Image, release func(), err error) {
	gc, err := flock(ctx, filepath.Join(c.dir, "gc.lock"), false)
	if err != nil {
		return Image{}, nil, err
	}
	img, err = c.Lookup(ref)
	if err != nil {
		gc.Close()
		return Image{}, nil, err
	}
	return img, func() { gc.Close() }, nil
}

// Ensure is Use, pulling ref first when the cache does not hold it (or
// holds a record without the config a sandbox needs): the image is pulled
// on its first use. pulled says whether this call pulled.
func (c *Cache) Ensure(ctx context.Context, ref string, opts PullOptions) (img Image, release func(), pulled bool, err error) {
	img, release, err = c.Use(ctx, ref)
	if err == nil && img.HasConfig {
		return img, release, false, nil
	}
	if err == nil {
		release()
	} else if !errors.Is(err, ErrNotFound) {
		return Image{}, nil, false, err
	}
	res, err := c.Pull(ctx, ref, opts)
	if err != nil {
		return Image{}, nil, false, err
	}
	// By digest: a tag moved by another pull meanwhile still finds this.
	img, release, err = c.Use(ctx, res.Digest)
	return img, release, true, err
}

// Root is img as a sandbox's root filesystem (dryexec.TrialSpec.Image):
// its layer directories, env and working directory; ref is how the caller
// named it.
func (c *Cache) Root(ref string, img Image) *dryexec.ImageRoot {
	return &dryexec.ImageRoot{Ref: ref, Digest: img.Digest, Layers: c.LayerDirs(img), Env: img.Env, WorkingDir: img.WorkingDir,
		UserXattr: c.form == FormUserXattr}
}
