package vm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"
)

// errSilent: the VM sent nothing, not even its guest's heartbeat, for
// longer than the rung's SilenceLimit while its command ran.
var errSilent = errors.New("the VM stopped answering")

// heardFile is the host's end of a VM's ctrl stream, noting when a read
// last returned something: the guest's frames and its heartbeat
// (wire.VerbVMAlive) both count.
type heardFile struct {
	*os.File
	start time.Time
	last  atomic.Int64 // since start, at the last read that returned bytes
}

func newHeardFile(f *os.File) *heardFile { return &heardFile{File: f, start: time.Now()} }

func (h *heardFile) Read(p []byte) (int, error) {
	n, err := h.File.Read(p)
	if n > 0 {
		h.heard()
	}
	return n, err
}

func (h *heardFile) heard() { h.last.Store(int64(time.Since(h.start))) }

// watch calls cancel with errSilent once nothing has been read for limit,
// counting from now, and then stops; stop ends the watch (idempotent). A
// stopped QEMU, a wedged guest kernel or a guest that no longer schedules
// its heartbeat all look the same from here: silence.
func (h *heardFile) watch(limit time.Duration, cancel context.CancelCauseFunc) (stop func()) {
	h.heard()
	done := make(chan struct{})
	var once atomic.Bool
	go func() {
		tick := time.NewTicker(min(limit/4, time.Second))
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				quiet := time.Since(h.start) - time.Duration(h.last.Load())
				if quiet > limit {
					cancel(fmt.Errorf("%w: nothing from it, not even its heartbeat, for %v (QEMU stopped or the VM's kernel hung)", errSilent, quiet.Round(time.Second)))
					return
				}
			}
		}
	}()
	return func() {
		if once.CompareAndSwap(false, true) {
			close(done)
		}
	}
}
