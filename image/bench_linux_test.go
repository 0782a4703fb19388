package image

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/dryexec/dryexec/internal/rungbench"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/rung/linuxns"
)

// BenchmarkUnpack measures a pull of one layer from an OCI layout (read from
// disk, gunzip, both digests, unpack) against `tar -xzf` of the same
// compressed layer, in the same run, for one big random file and for many
// small files. Bytes are the uncompressed layer's.
func BenchmarkUnpack(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("unpacking images needs root")
	}
	small := func() v1.Layer {
		var ents []ent
		for d := range 50 {
			ents = append(ents, ent{name: fmt.Sprintf("d%d/", d), typ: '5'})
			for f := range 100 {
				ents = append(ents, ent{name: fmt.Sprintf("d%d/f%d", d, f), body: strings.Repeat(fmt.Sprint(f), 2000)})
			}
		}
		return tarLayer(b, ents...)
	}
	for _, tc := range []struct {
		name  string
		layer v1.Layer
	}{
		{"one-64MiB-file", randomLayer(b, 64<<20)},
		{"5000-small-files", small()},
	} {
		lay := layoutOf(b, mkImage(b, tc.layer))
		rc, _ := tc.layer.Uncompressed()
		n, _ := io.Copy(io.Discard, rc)
		rc.Close()
		zfile := filepath.Join(b.TempDir(), "layer.tgz")
		zr, _ := tc.layer.Compressed()
		f, _ := os.Create(zfile)
		io.Copy(f, zr)
		f.Close()
		b.Run(tc.name+"/dryexec", func(b *testing.B) {
			b.SetBytes(n)
			for b.Loop() {
				c, err := Open(b.TempDir(), nil)
				if err != nil {
					b.Fatal(err)
				}
				if _, err := c.Pull(context.Background(), "oci:"+lay, PullOptions{}); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(tc.name+"/tar-x", func(b *testing.B) {
			b.SetBytes(n)
			for b.Loop() {
				if out, err := exec.Command("tar", "-xzf", zfile, "-C", b.TempDir()).CombinedOutput(); err != nil {
					b.Fatalf("%v: %s", err, out)
				}
			}
		})
	}
}

// BenchmarkErofs measures the vm rung's first use of an image against its
// cached use, interleaved in the same run: a fresh cache's pull and unpack
// (the ns rung's first use, the baseline), the same plus packing the merged
// view as an erofs image (the vm rung's first use), and a use that finds the
// erofs image cached. It reports each median (ms) and the packing's cost as
// a ratio to the pull:
//
//	go test -run '^$' -bench Erofs -benchtime 5x ./image
func BenchmarkErofs(b *testing.B) {
	testreq.NeedRoot(b)
	needMkfsErofs(b)
	var ents []ent
	for d := range 20 {
		ents = append(ents, ent{name: fmt.Sprintf("d%d/", d), typ: '5'})
		for f := range 100 {
			ents = append(ents, ent{name: fmt.Sprintf("d%d/f%d", d, f), body: strings.Repeat(fmt.Sprint(f), 2000)})
		}
	}
	lay := layoutOf(b, mkImage(b, randomLayer(b, 16<<20), tarLayer(b, ents...)))
	pull := func(erofs bool) error {
		c, err := Open(b.TempDir(), nil)
		if err != nil {
			return err
		}
		res, err := c.Pull(context.Background(), "oci:"+lay, PullOptions{})
		if err != nil || !erofs {
			return err
		}
		view, err := linuxns.ImageView(linuxns.Name, c.LayerDirs(res.Image))
		if err != nil {
			return err
		}
		defer view.Close()
		_, _, err = c.Erofs(context.Background(), res.Image, view)
		return err
	}
	cache, err := Open(b.TempDir(), nil)
	if err != nil {
		b.Fatal(err)
	}
	res, err := cache.Pull(context.Background(), "oci:"+lay, PullOptions{})
	if err != nil {
		b.Fatal(err)
	}
	view, err := linuxns.ImageView(linuxns.Name, cache.LayerDirs(res.Image))
	if err != nil {
		b.Fatal(err)
	}
	_, _, err = cache.Erofs(context.Background(), res.Image, view)
	view.Close()
	if err != nil {
		b.Fatal(err)
	}
	med := rungbench.Interleave(b, []rungbench.Candidate{
		{Name: "pull_unpack", Run: func() error { return pull(false) }},
		{Name: "pull_unpack_erofs", Run: func() error { return pull(true) }},
		{Name: "cached", Run: func() error {
			img, release, err := cache.Use(context.Background(), res.Digest)
			if err != nil {
				return err
			}
			defer release()
			// A cached use opens no view: the erofs image is found first.
			_, built, err := cache.Erofs(context.Background(), img, nil)
			if err == nil && built {
				err = fmt.Errorf("built again")
			}
			return err
		}},
	})
	b.ReportMetric(med[1]/med[0], "first_erofs/first_pull")
}
