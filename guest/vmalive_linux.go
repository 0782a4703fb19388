package guest

import (
	"time"

	"github.com/dryexec/dryexec/wire"
)

// vmHeartbeat sends wire.VerbVMAlive on conn every wire.VMAliveEvery until
// the returned stop is called or a send fails (the host is gone): the host
// ends a trial whose VM falls silent, where a command without a timeout
// would otherwise be waited for forever. It runs on a goroutine of its
// own, so a command that keeps the trial's own loop waiting does not stop
// it; a stopped QEMU or a wedged kernel does.
func vmHeartbeat(conn *wire.Conn) (stop func()) {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(wire.VMAliveEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if conn.Send(wire.KindEvent, wire.VerbVMAlive, 0, nil) != nil {
					return
				}
			}
		}
	}()
	return func() { close(done) }
}
