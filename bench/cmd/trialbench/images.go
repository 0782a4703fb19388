//go:build linux

package main

import (
	"archive/tar"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/image"
	"github.com/dryexec/dryexec/internal/imagetest"
	"github.com/dryexec/dryexec/rung/linuxns"
)

// imagesGroup (docs/images.md, "Performance"): an image's first use (pull
// from a registry on loopback and unpack) against its cached use; a trial on
// the image against one on the host's view; and the cache's unpack
// throughput against tar -xzf of the same layers, in the same run.
//
// The image: the host's sh and cat with their libraries, 2,000 files of
// 2–8 KiB, and one 32 MiB file of random bytes (incompressible: gzip costs
// what it costs on real binaries).
func imagesGroup(e *env) ([]group, error) {
	if os.Getuid() != 0 {
		return nil, fmt.Errorf("%w: unpacking images needs root", errSkip)
	}
	img, uncompressed, err := benchImage()
	if err != nil {
		return nil, err
	}
	host, stop := imagetest.NewRegistry()
	e.onExit(stop)
	ref := host + "/bench/img:1"
	if err := imagetest.NewPush(ref, img); err != nil {
		return nil, err
	}
	layoutDir := filepath.Join(e.work, "layout")
	layoutRef, err := imagetest.NewLayout(layoutDir, img)
	if err != nil {
		return nil, err
	}
	blobs, err := layerBlobs(img, layoutDir)
	if err != nil {
		return nil, err
	}
	// fresh makes an empty cache dir for a first use (not measured).
	var cold string
	n := 0
	fresh := func() error {
		if cold != "" {
			removeTree(cold)
		}
		n++
		cold = filepath.Join(e.work, fmt.Sprintf("images-%d", n))
		return nil
	}
	e.onExit(func() { removeTree(cold) })
	use := func(dir, ref string) error {
		c, err := image.Open(dir, nil)
		if err != nil {
			return err
		}
		_, release, _, err := c.Ensure(e.ctx, ref, image.PullOptions{})
		if err == nil {
			release()
		}
		return err
	}
	warm := filepath.Join(e.work, "images-warm")
	if err := use(warm, ref); err != nil {
		return nil, err
	}
	c, err := image.Open(warm, nil)
	if err != nil {
		return nil, err
	}
	cached, err := c.Lookup(ref)
	if err != nil {
		return nil, err
	}
	root := c.Root(ref, cached)
	mb := float64(uncompressed) / 1e6
	first := group{key: "images", title: fmt.Sprintf("Image use: first (pull from a loopback registry + unpack, %.0f MB unpacked) vs cached", mb),
		unit: unitMS, bases: []int{1}, cands: []candidate{
			{name: "first use: Cache.Ensure, empty cache (pull + verify + unpack)", prep: fresh, run: timed(func() error { return use(cold, ref) })},
			{name: "cached use: Cache.Ensure, image in the cache", label: "cached", run: timed(func() error { return use(warm, ref) })},
		}}
	r := &linuxns.Rung{}
	onImage := dryexec.ImageAction(dryexec.Action{Argv: []string{"sh", "-c", "echo x > f"}}, root)
	trial := group{key: "images", title: "Cold trial of sh -c 'echo x > f': on the image vs on the host's view", unit: unitMS, bases: []int{1},
		cands: []candidate{
			{name: "Rung.Trial on the image (its layers the overlay's lowers)", run: timed(func() error {
				return checkDelta(r.Trial(e.ctx, dryexec.TrialSpec{Action: onImage, Image: root}))
			})},
			{name: "Rung.Trial on the host's view", label: "host view", run: timed(func() error { return e.trial(r, e.empty, "sh", "-c", "echo x > f") })},
		}}
	var tarDir string
	unpack := group{key: "images", title: fmt.Sprintf("Unpack throughput: the image cache vs tar -xzf of the same %d layers (%.0f MB unpacked)", len(blobs), mb),
		unit: rate("MB/s"), bases: []int{1},
		note: "The cache reads each gzip layer from an OCI layout, checks its compressed digest and its diff ID, and unpacks it with openat2 beneath the layer's directory (whiteouts in overlay form); tar -xzf only unpacks.",
		cands: []candidate{
			{name: "image cache: Cache.Pull from an OCI layout into an empty cache", prep: fresh, run: func() (float64, error) {
				s, err := timed(func() error { return use(cold, layoutRef) })()
				return mb / (s / 1e3), err
			}},
			{name: "tar -xzf of each layer into an empty directory", label: "tar -x", prep: func() error {
				if tarDir != "" {
					removeTree(tarDir)
				}
				tarDir = filepath.Join(e.work, "tar-x")
				return os.Mkdir(tarDir, 0o700)
			}, run: func() (float64, error) {
				s, err := timed(func() error {
					for _, b := range blobs {
						if out, err := exec.Command("tar", "-xzf", b, "-C", tarDir).CombinedOutput(); err != nil {
							return fmt.Errorf("tar: %v %s", err, out)
						}
					}
					return nil
				})()
				return mb / (s / 1e3), err
			}},
		}}
	e.onExit(func() { removeTree(tarDir) })
	return []group{first, trial, unpack}, nil
}

// benchImage builds the benchmark's image and says how many bytes its
// layers hold uncompressed.
func benchImage() (v1.Image, int64, error) {
	tools, err := imagetest.NewTools("cat")
	if err != nil {
		return nil, 0, err
	}
	var small []imagetest.Entry
	small = append(small, imagetest.Entry{Name: "data/", Type: tar.TypeDir})
	for i := range 2000 {
		b := make([]byte, 2048+(i%4)*2048)
		rand.Read(b)
		small = append(small, imagetest.Entry{Name: fmt.Sprintf("data/f%04d", i), Body: b})
	}
	smallL, err := imagetest.NewLayer(small...)
	if err != nil {
		return nil, 0, err
	}
	big := make([]byte, 32<<20)
	rand.Read(big)
	bigL, err := imagetest.NewLayer(imagetest.Entry{Name: "big.bin", Body: big})
	if err != nil {
		return nil, 0, err
	}
	img, err := imagetest.NewImage(imagetest.Config{Env: []string{"PATH=/bin"}, WorkingDir: "/"}, tools, smallL, bigL)
	if err != nil {
		return nil, 0, err
	}
	var total int64
	for _, l := range []v1.Layer{tools, smallL, bigL} {
		rc, err := l.Uncompressed()
		if err != nil {
			return nil, 0, err
		}
		n, err := io.Copy(io.Discard, rc)
		rc.Close()
		if err != nil {
			return nil, 0, err
		}
		total += n
	}
	return img, total, nil
}

// layerBlobs are the paths of img's compressed layers in the layout at dir.
func layerBlobs(img v1.Image, dir string) ([]string, error) {
	ls, err := img.Layers()
	if err != nil {
		return nil, err
	}
	var out []string
	for _, l := range ls {
		d, err := l.Digest()
		if err != nil {
			return nil, err
		}
		out = append(out, filepath.Join(dir, "blobs", d.Algorithm, d.Hex))
	}
	return out, nil
}

// removeTree removes a cache or unpacked tree (dirs made writable first:
// a layer may hold read-only dirs).
func removeTree(p string) {
	if p == "" {
		return
	}
	exec.Command("chmod", "-R", "u+rwx", p).Run()
	os.RemoveAll(p)
}
