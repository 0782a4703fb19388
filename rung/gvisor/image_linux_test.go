package gvisor_test

import (
	"archive/tar"
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/imagetest"
	"github.com/dryexec/dryexec/internal/rungcompare"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/rung/gvisor"
)

// TestImageSameDeltaAsNS runs the same commands on an image with every
// awkward layer case (whiteouts, an opaque dir, setuid and setgid bits,
// absolute and dangling symlinks, skipped device nodes, a FIFO), pulled
// from a registry on loopback, through `dryexec run --image` on ns and on
// gvisor, and requires the same delta over the image, field by field.
func TestImageSameDeltaAsNS(t *testing.T) {
	requireBoth(t)
	rungcompare.ImageSameDeltaAsNS(t, gvisor.Name, rungcompare.AwkwardImage(t), rungcompare.ImageCases())
}

// TestImageSessionSameAsNS runs the same sessions on that image on ns and
// on gvisor (the workspace pushed over the image, commands that change it
// and read the image around it) and requires the same results and diffs.
func TestImageSessionSameAsNS(t *testing.T) {
	requireBoth(t)
	root := rungcompare.PullImage(t, rungcompare.AwkwardImage(t))
	rungcompare.SessionSameAsNS(t, gvisor.Name, rungcompare.ImageSessionCases(root))
}

// TestImageTrialEdges: what a gvisor trial on an image refuses, each with
// the same typed error as on ns (a cwd the image lacks, more layers than
// overlayfs stacks), and /tmp, over which runsc would put a tmpfs of
// gVisor's own, whose writes the delta cannot see: on an image's /tmp a
// write is in the delta; without /tmp it fails (as on ns) and changes
// nothing; where /tmp is a symlink, the delta warns.
func TestImageTrialEdges(t *testing.T) {
	requireGVisor(t)
	pull := func(name string, cfg imagetest.Config, layers ...v1.Layer) *dryexec.ImageRoot {
		return rungcompare.PullImage(t, imagetest.Layout(t, filepath.Join(t.TempDir(), name), imagetest.Image(t, cfg, layers...)))
	}
	full := pull("full", imagetest.AwkwardConfig(), append([]v1.Layer{imagetest.Tools(t)}, imagetest.Awkward(t)...)...)
	cfg := imagetest.Config{Env: []string{"PATH=/bin"}}
	noTmp := pull("notmp", cfg, imagetest.Tools(t))
	linkTmp := pull("linktmp", cfg, imagetest.Tools(t), imagetest.Layer(t, imagetest.Entry{Name: "var/", Type: tar.TypeDir},
		imagetest.Entry{Name: "var/tmp/", Type: tar.TypeDir, Mode: 0o1777}, imagetest.Entry{Name: "tmp", Type: tar.TypeSymlink, Link: "var/tmp"}))
	deep := *full
	for len(deep.Layers) <= dryexec.MaxImageLayers {
		deep.Layers = append(deep.Layers, full.Layers[len(full.Layers)-1])
	}
	const tmpWarning = "the image's /tmp is not a directory"
	for _, tc := range []struct {
		name      string
		img       *dryexec.ImageRoot
		cwd       string
		wantErr   error
		wantFiles []string
		failed    bool // the write to /tmp fails
		warned    bool
	}{
		{name: "cwd_missing", img: full, cwd: "/nowhere", wantErr: dryexec.ErrBadAction},
		{name: "too_many_layers", img: &deep, wantErr: dryexec.ErrTooManyLayers},
		{name: "tmp", img: full, wantFiles: []string{"create /tmp/x"}},
		{name: "no_tmp", img: noTmp, failed: true},
		{name: "tmp_symlink", img: linkTmp, warned: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := dryexec.ImageAction(dryexec.Action{Argv: []string{"sh", "-c", "echo x > /tmp/x"}, Cwd: tc.cwd}, tc.img)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			d, err := (&gvisor.Rung{}).Trial(ctx, dryexec.TrialSpec{Action: a, Image: tc.img})
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("%v, want %v", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			warned := slices.ContainsFunc(d.Warnings, func(w string) bool { return strings.Contains(w, tmpWarning) })
			if warned != tc.warned {
				t.Errorf("warnings %q: want the /tmp warning %v", d.Warnings, tc.warned)
			}
			var files []string
			for _, f := range d.Files {
				files = append(files, string(f.Op)+" "+f.Path)
			}
			if !slices.Equal(files, tc.wantFiles) {
				t.Errorf("files %q, want %q (stderr %q)", files, tc.wantFiles, d.Process.Stderr)
			}
			if failed := d.Process.ExitCode != 0; failed != tc.failed {
				t.Errorf("exit %d (stderr %q), want the write to fail: %v", d.Process.ExitCode, d.Process.Stderr, tc.failed)
			}
		})
	}
}

func requireGVisor(t *testing.T) {
	t.Helper()
	testreq.Need(t, testreq.GVisor, (&gvisor.Rung{}).Available(context.Background()))
}
