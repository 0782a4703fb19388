package vm

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/fsdelta"
	"github.com/dryexec/dryexec/rung/linuxns"
)

// walk walks every upper dir through the host's handle on the scratch
// tmpfs (fswalk) and diffs it with the host into d (fsdelta), as the gvisor
// rung does: QEMU,
// whose 9p server wrote them for the VM, is gone.
func (t *trial) walk(ctx context.Context, deadline time.Time, d *dryexec.StateDelta) error {
	var err error
	t.expired, t.crossed, err = fsdelta.DiffScratch(ctx, fsdelta.Scratch{FD: t.scratchFD, Uppers: t.uppers,
		Hidden: append(slices.Clone(t.cover.Masks), t.cover.Hidden...), Deadline: deadline}, t.spec, d)
	return err
}

// report walks the upper dirs and builds the delta; cause is why the VM's
// own report is missing or cut short (nil: it is complete).
func (t *trial) report(ctx context.Context, cause error) (*dryexec.StateDelta, error) {
	a := t.spec.Action
	d := &dryexec.StateDelta{TrialID: t.spec.TrialID, Rung: Name, Action: a}
	d.Violations = append(d.Violations, t.watch.Check()...)
	if w := t.watch.Warning(); w != "" {
		d.Warnings = append(d.Warnings, w)
	}
	end := time.Now()
	deadline := (&linuxns.Rung{CollectMin: t.r.CollectMin, CollectTimeout: t.r.CollectTimeout}).CollectDeadline(a, t.sentAt, end)
	werr := t.walk(ctx, deadline, d)
	var se *fsdelta.StoreError
	if errors.As(werr, &se) {
		return nil, fmt.Errorf("trial %s: %w", t.spec.TrialID, werr)
	}
	var why []string
	if cause != nil {
		why = append(why, fmt.Sprintf("the VM failed mid-trial (%v)", cause))
	}
	if werr != nil {
		why = append(why, fmt.Sprintf("the host's walk of the upper dirs failed (%v): the files listed are those walked before", werr))
	}
	d.Memory.Method = "none"
	p := &d.Process
	if ex := t.exit; ex != nil {
		p.ExitCode, p.Signal, p.TimedOut, p.DurationNS = ex.ExitCode, ex.Signal, ex.TimedOut, ex.DurationNS
		if ex.StartError != "" {
			t.errb.Write([]byte("dryexec: " + ex.StartError + "\n"))
		}
	} else {
		p.ExitCode = -1
		p.DurationNS = int64(end.Sub(t.sentAt))
		why = append(why, "the command's exit status is unknown (exit_code -1), and so are its CPU time and memory")
	}
	if dn := t.done; dn != nil {
		p.CPUUserNS, p.CPUSysNS, p.PeakRSSBytes = dn.CPUUserNS, dn.CPUSysNS, dn.MaxRSS
		d.Memory.PeakRSSBytes = dn.MaxRSS
	}
	if t.upperFull || upperFull(t.scratchFD) {
		d.Violations = append(d.Violations, dryexec.Violation{Kind: "limit",
			Detail: fmt.Sprintf("upper storage full: the trial may write at most %d bytes (--upper-size)", t.spec.UpperSizeBytes)})
	}
	// Which accelerator ran, and the boot's cost, are part of the record:
	// TCG and KVM differ by an order of magnitude in speed, not in what
	// the command may do.
	d.Warnings = append(d.Warnings, fmt.Sprintf("vm: QEMU microvm, accel=%s, booted to the guest's hello in %v", t.m.accel, t.boot.Round(time.Millisecond)))
	if len(why) > 0 {
		d.Incomplete = true
		d.IncompleteReason = strings.Join(why, "; ")
		if t.r.Log != nil {
			t.r.Log.Warn("trial incomplete", "trial", t.spec.TrialID, "reason", d.IncompleteReason)
		}
	}
	if t.crossed != "" {
		d.Incomplete = true
		d.IncompleteReason = strings.TrimPrefix(d.IncompleteReason+"; "+t.crossed, "; ")
	}
	if t.expired {
		d.Incomplete = true
		msg := fmt.Sprintf("the trial ran out of time to collect what it wrote (%s after the command's start): "+
			"files past it are listed with their size, without their content", deadline.Sub(t.sentAt).Round(time.Millisecond))
		d.IncompleteReason = strings.TrimPrefix(d.IncompleteReason+"; "+msg, "; ")
	}
	t.pipes.Wait()
	out, otr := t.out.Bytes()
	errb, etr := t.errb.Bytes()
	p.Stdout, p.StdoutTruncated = string(out), otr
	p.Stderr, p.StderrTruncated = string(errb), etr
	d.Normalize()
	d.ComputeTotals()
	t.r.trace("done")
	return d, nil
}
