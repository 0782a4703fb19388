package gvisor

import (
	"context"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/image"
	"github.com/dryexec/dryexec/internal/imagetest"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func TestTmpDebug(t *testing.T) {
	img := imagetest.Image(t, imagetest.AwkwardConfig(), append([]v1.Layer{imagetest.Tools(t, "cat")}, imagetest.Awkward(t)...)...)
	lay := imagetest.Layout(t, t.TempDir()+"/l", img)
	c, _ := image.Open(t.TempDir(), nil)
	im, rel, _, err := c.Ensure(context.Background(), lay, image.PullOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer rel()
	root := c.Root(lay, im)
	a := dryexec.ImageAction(dryexec.Action{Argv: []string{"sh", "-c", "pwd; cat keep.txt; echo x > new"}}, root)
	r := &Rung{RunscFlags: []string{"--debug", "--debug-log=/tmp/gvdbg/"}}
	d, err := r.Trial(context.Background(), dryexec.TrialSpec{Action: a, Image: root})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v %+v", d.Process, d.Files)
}
