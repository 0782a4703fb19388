//go:build linux || darwin

package seatbelt

import (
	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/fsdelta"
)

// newDiffer is package fsdelta's Differ over the original working
// directory, the one the host rung feeds from its copy: it checks every
// entry the clone walk reports against the host and never looks at or
// beneath a covered path (hidden).
func newDiffer(orig string, spec dryexec.TrialSpec, hidden []string) (differ, error) {
	d := fsdelta.NewDiffer([]fsdelta.Mount{{Path: orig}}, spec.Blobs, spec.DiffMaxBytes)
	if spec.SpillDir != "" {
		d.SpillTo(spec.SpillDir, 0)
	}
	d.SetHidden(hidden)
	return d, nil
}
