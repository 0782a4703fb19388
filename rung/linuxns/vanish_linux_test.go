package linuxns

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/wire"
)

// A host mount planned by the host but unmounted and removed before the guest
// overlays it (other programs' mounts come and go) is skipped; the trial runs.
func TestVanishedMountIsSkipped(t *testing.T) {
	requireNS(t)
	dir := t.TempDir()
	gone := t.TempDir() + "/was-a-mount"
	infos, err := mountinfo.GetMounts(nil)
	if err != nil {
		t.Fatal(err)
	}
	mounts := append(planMounts(infos), wire.MountSpec{Path: gone}, wire.MountSpec{Path: gone + "/below"})
	spec := dryexec.TrialSpec{Action: dryexec.Action{Argv: []string{"sh", "-c", "echo x > f"}, Cwd: dir, Env: testPath}}.WithDefaults()
	spec.TrialID = dryexec.NewTrialID()
	r := &Rung{}
	sb, err := sandboxFor(spec, nil)
	if err != nil {
		t.Fatal(err)
	}
	sb.Mounts = mounts
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	tr, err := r.prepare(ctx, sb, spec.TrialID, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.cleanup()
	d, err := tr.trial(ctx, spec)
	if err != nil {
		t.Fatalf("trial with a vanished mount: %v", err)
	}
	validate(t, d)
	if len(d.Files) != 1 || d.Files[0].Path != dir+"/f" || d.Files[0].Op != dryexec.OpCreate {
		t.Fatalf("files: %v", opPaths(d, ""))
	}
	if _, err := os.Stat(dir + "/f"); err == nil {
		t.Fatal("f was written on the host")
	}
}
