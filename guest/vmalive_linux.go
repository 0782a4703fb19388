package guest

import (
	"sync"
	"time"

	"github.com/dryexec/dryexec/wire"
)

// vmHeartbeat calls send (which sends wire.VerbVMAlive to the host) every
// wire.VMAliveEvery until the returned stop is called or a send fails (the
// host is gone): the host ends a trial or session whose VM falls silent,
// where a command without a timeout would otherwise be waited for
// forever. It runs on a goroutine of its own, so a command that keeps the
// guest's own loop waiting does not stop it; a stopped QEMU or a wedged
// kernel does. stop returns once no heartbeat is being sent, so that
// nothing of it follows what the caller sends next (a parked session's
// answer, before QEMU saves the VM).
func vmHeartbeat(send func() error) (stop func()) {
	done := make(chan struct{})
	var ended sync.WaitGroup
	ended.Add(1)
	go func() {
		defer ended.Done()
		t := time.NewTicker(wire.VMAliveEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				if send() != nil {
					return
				}
			}
		}
	}()
	var once sync.Once
	return func() {
		once.Do(func() { close(done) })
		ended.Wait()
	}
}
