package host

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/fsdelta"
	"github.com/dryexec/dryexec/fswalk"
	"github.com/dryexec/dryexec/rung/internal/hostproc"
	"github.com/dryexec/dryexec/rung/linuxns"
)

// Trial implements dryexec.Rung: the command runs, unconfined, in a scratch
// copy of its working directory (owners, modes, mtimes, symlinks, fifos and
// hard links kept); the delta is that copy's changes against the original,
// through the same Differ the ns rung feeds from its guest. It says "no
// isolation" in its warnings, always. What the command does outside the
// copy (an absolute path, a network connection, a process it detaches) is
// done on the host for real and is in no delta; a --net spec is refused,
// since nothing could keep that promise.
func (r *Rung) Trial(ctx context.Context, spec dryexec.TrialSpec) (*dryexec.StateDelta, error) {
	spec = spec.WithDefaults()
	if err := linuxns.CheckAction(spec.Action); err != nil {
		return nil, err
	}
	if len(spec.Net) > 0 {
		return nil, &dryexec.IsolationUnavailableError{Rung: Name, Missing: "network interception (the host rung shares the host's network: --net cannot be honoured, not even none; use the ns rung)"}
	}
	if spec.TrialID == "" {
		spec.TrialID = dryexec.NewTrialID()
	}
	scratch, err := os.MkdirTemp("", "dryexec-host-"+spec.TrialID+"-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(scratch)
	orig := filepath.Clean(spec.Action.Cwd)
	root := filepath.Join(scratch, "w")
	cp, err := copyTree(orig, root)
	if err != nil {
		return nil, fmt.Errorf("host rung: copying %s: %w", orig, err)
	}
	// Everything the command changes in the copy has a ctime from since on
	// (the kernel sets it on every write, chmod, rename and link; no call
	// sets it back): the walk compares nothing older with the host.
	since, err := fswalk.FSTick(scratch)
	if err != nil {
		return nil, err
	}
	d := &dryexec.StateDelta{TrialID: spec.TrialID, Rung: Name, Action: spec.Action}
	d.Warnings = append(d.Warnings, NoIsolation)
	d.Warnings = append(d.Warnings, cp.warnings...)
	if err := hostproc.Run(ctx, spec, spec.Action.Argv, hostproc.Environ(spec.Action.Env), root, &d.Process); err != nil {
		return nil, err
	}
	differ := fsdelta.NewDiffer([]fsdelta.Mount{{Path: orig}}, spec.Blobs, spec.DiffMaxBytes)
	defer differ.Close()
	if spec.SpillDir != "" {
		differ.SpillTo(spec.SpillDir, 0)
	}
	if err := fswalk.WalkTree(root, original{orig: orig, since: since, skip: cp.skip}, differ.Add); err != nil {
		return nil, err
	}
	if err := differ.FinishDelta(d); err != nil {
		return nil, err
	}
	d.Memory.Method = "none"
	d.Memory.PeakRSSBytes = d.Process.PeakRSSBytes
	d.Normalize()
	d.ComputeTotals()
	return d, nil
}
