package fsdelta

import (
	"cmp"
	"context"
	"errors"
	"os"
	"strconv"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/fswalk"
	"github.com/dryexec/dryexec/wire"
)

// Scratch is a trial's upper dirs as the host holds them once the sandbox
// is gone (the gvisor and vm rungs): u/0, u/1, … beneath the scratch tmpfs
// the host has an fd on, one per mount of Uppers, written by an overlay
// mounted as root (redirect_dir=on, trusted.overlay.* markers).
type Scratch struct {
	FD     int
	Uppers []Mount
	// Hidden are the masks and dryexec's own state: a dir renamed around
	// one must not bring the host's contents there into the delta.
	Hidden   []string
	Deadline time.Time
}

// DiffScratch walks every upper dir of s in this process (fswalk passes
// the kernel one name at a time relative to a dir fd, never following a
// link the sandbox made) and diffs it with the host into d: its files,
// which may be spilled to spec.SpillDir, and its touched paths. After a
// walk error d holds what was walked before it; a *StoreError is returned
// with d unfinished. expired and crossed are the Differ's Expired and
// CrossedReason.
func DiffScratch(ctx context.Context, s Scratch, spec dryexec.TrialSpec, d *dryexec.StateDelta) (expired bool, crossed string, err error) {
	differ := NewDiffer(s.Uppers, spec.Blobs, spec.DiffMaxBytes)
	defer differ.Close()
	if spec.SpillDir != "" {
		differ.SpillTo(spec.SpillDir, 0)
	}
	differ.SetDeadline(s.Deadline)
	differ.SetHidden(s.Hidden)
	base := "/proc/self/fd/" + strconv.Itoa(s.FD) + "/u/"
	var werr error
	for i := range s.Uppers {
		werr = fswalk.Walk(base+strconv.Itoa(i), i, fswalk.WalkOptions{Redirects: true}, func(e *wire.FSEntry, content *os.File) error {
			if err := ctx.Err(); err != nil {
				return err
			}
			if content == nil {
				// Not a typed nil *os.File inside a non-nil io.Reader.
				return differ.Add(e, nil)
			}
			return differ.Add(e, content)
		})
		if werr != nil {
			break
		}
	}
	if se := (*StoreError)(nil); errors.As(werr, &se) {
		return false, "", werr
	}
	err = differ.FinishDelta(d)
	return differ.Expired(), differ.CrossedReason(), cmp.Or(werr, err)
}
