package vm

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/image"
	"github.com/dryexec/dryexec/internal/imagetest"
	"github.com/dryexec/dryexec/internal/rungbench"
	"github.com/dryexec/dryexec/rung/linuxns"
)

// BenchmarkImageTrial times a cold /bin/true trial on an image (the host's
// sh and true, from an OCI layout) on vm and on ns with the image cached, a
// vm trial on the image's first use (a fresh cache: pull and unpack, then
// the trial), a vm trial on the host's view, and a vm trial on the image
// exported over 9p as before the erofs drive, interleaved in each
// iteration; it reports each median (ms) and the ratios of vm to ns on the
// image, of the image to the host's view on vm, of first use to cached,
// and of the erofs drive to 9p:
//
//	go test -run '^$' -bench ImageTrial -benchtime 3x ./rung/vm
func BenchmarkImageTrial(b *testing.B) {
	r := &Rung{GuestExe: staticGuest(b)}
	if err := r.Available(context.Background()); err != nil {
		b.Skip(err)
	}
	ref := imagetest.Layout(b, b.TempDir(), imagetest.Image(b, imagetest.Config{Env: []string{"PATH=/bin"}}, imagetest.Tools(b, "true")))
	root := func() (*dryexec.ImageRoot, func(), error) { return pulledRoot(b, ref) }
	cached, release, err := root()
	if err != nil {
		b.Fatal(err)
	}
	defer release()
	run := func(rung dryexec.Rung, img *dryexec.ImageRoot) error {
		// A timeout: a VM that never reports fails the run, not hangs it.
		spec := dryexec.TrialSpec{Image: img, Action: dryexec.Action{Argv: []string{"/bin/true"}, Cwd: "/",
			Env: map[string]string{"PATH": "/bin"}, TimeoutMS: 300_000}}
		d, err := rung.Trial(context.Background(), spec)
		if err == nil && (d.Process.ExitCode != 0 || d.Incomplete) {
			err = fmt.Errorf("exit %d, incomplete %v (%s), stderr %s", d.Process.ExitCode, d.Incomplete, d.IncompleteReason, d.Process.Stderr)
		}
		return err
	}
	med := rungbench.Interleave(b, []rungbench.Candidate{
		{Name: "vm_image", Run: func() error { return run(r, cached) }},
		{Name: "ns_image", Run: func() error { return run(&linuxns.Rung{}, cached) }},
		{Name: "vm_image_first_use", Run: func() error {
			img, release, err := root()
			if err != nil {
				return err
			}
			defer release()
			return run(r, img)
		}},
		rungbench.Trial(b, r), // on the host's view: "vm"
		{Name: "vm_image_9p", Run: func() error { return run(&Rung{GuestExe: r.GuestExe, imageOver9p: true}, cached) }},
	})
	b.ReportMetric(med[0]/med[1], "vm/ns")
	b.ReportMetric(med[0]/med[3], "image/host")
	b.ReportMetric(med[2]/med[0], "first/cached")
	b.ReportMetric(med[0]/med[4], "erofs/9p")
}

// BenchmarkImageReadMany times a cold trial that reads many small files
// (2000 of 4 KiB, cat of them all): on an image on vm (the VM's kernel
// reads them from the erofs drive), on the same image exported over 9p as
// before the erofs drive, on the same files in a host directory on vm (the
// host's view, over 9p), and on the image on ns, interleaved in each
// iteration; it reports each median (ms) and the ratios of the erofs drive
// to the two 9p ones and to ns:
//
//	go test -run '^$' -bench ImageReadMany -benchtime 3x ./rung/vm
func BenchmarkImageReadMany(b *testing.B) {
	r := &Rung{GuestExe: staticGuest(b)}
	if err := r.Available(context.Background()); err != nil {
		b.Skip(err)
	}
	const files = 2000
	body := bytes.Repeat([]byte("0123456789abcdef"), 256)
	ents := make([]imagetest.Entry, 0, files)
	host := b.TempDir()
	if err := os.Mkdir(filepath.Join(host, "data"), 0o755); err != nil {
		b.Fatal(err)
	}
	for i := range files {
		name := fmt.Sprintf("data/f%04d", i)
		ents = append(ents, imagetest.Entry{Name: name, Body: body, Mode: 0o644})
		if err := os.WriteFile(filepath.Join(host, name), body, 0o644); err != nil {
			b.Fatal(err)
		}
	}
	ref := imagetest.Layout(b, b.TempDir(), imagetest.Image(b, imagetest.Config{Env: []string{"PATH=/bin"}},
		imagetest.Tools(b, "cat", "wc"), imagetest.Layer(b, ents...)))
	cached, release, err := pulledRoot(b, ref)
	if err != nil {
		b.Fatal(err)
	}
	defer release()
	run := func(rung dryexec.Rung, img *dryexec.ImageRoot, cwd string) error {
		spec := dryexec.TrialSpec{Image: img, Action: dryexec.Action{Argv: []string{"sh", "-c", "cat data/* | wc -c"}, Cwd: cwd,
			Env: map[string]string{"PATH": "/bin:/usr/bin"}, TimeoutMS: 300_000}}
		d, err := rung.Trial(context.Background(), spec)
		if err == nil && (d.Process.ExitCode != 0 || d.Incomplete || strings.TrimSpace(d.Process.Stdout) != strconv.Itoa(files*len(body))) {
			err = fmt.Errorf("exit %d, stdout %q, incomplete %v (%s), stderr %s", d.Process.ExitCode, d.Process.Stdout, d.Incomplete, d.IncompleteReason, d.Process.Stderr)
		}
		return err
	}
	med := rungbench.Interleave(b, []rungbench.Candidate{
		{Name: "vm_image_erofs", Run: func() error { return run(r, cached, "/") }},
		{Name: "vm_image_9p", Run: func() error { return run(&Rung{GuestExe: r.GuestExe, imageOver9p: true}, cached, "/") }},
		{Name: "vm_host_9p", Run: func() error { return run(r, nil, host) }},
		{Name: "ns_image", Run: func() error { return run(&linuxns.Rung{}, cached, "/") }},
	})
	b.ReportMetric(med[0]/med[1], "erofs/image_9p")
	b.ReportMetric(med[0]/med[2], "erofs/host_9p")
	b.ReportMetric(med[0]/med[3], "vm/ns")
}

// pulledRoot pulls ref into a fresh cache and returns it as a sandbox's
// root, and the release of its hold on the image.
func pulledRoot(b *testing.B, ref string) (*dryexec.ImageRoot, func(), error) {
	c, err := image.Open(b.TempDir(), nil)
	if err != nil {
		return nil, nil, err
	}
	img, release, _, err := c.Ensure(context.Background(), ref, image.PullOptions{})
	if err != nil {
		return nil, nil, err
	}
	return c.Root(ref, img), release, nil
}
