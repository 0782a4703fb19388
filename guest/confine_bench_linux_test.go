package guest

import (
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/wire"
)

// BenchmarkStartTrue measures what confinement adds to starting one command:
// plain fork+exec+wait of /bin/true; the same from a freshly confined
// launcher thread (filter compiled, Landlock ruleset built, thread confined,
// supervisor started and stopped: a trial's whole fixed cost); and with the
// memory tracer on as well.
func BenchmarkStartTrue(b *testing.B) {
	run := func(b *testing.B, attr *syscall.SysProcAttr, mt *memTracer) {
		pid, err := syscall.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{Sys: attr})
		if err != nil {
			b.Fatal(err)
		}
		if mt != nil {
			if err := takeFirstStop(pid, 0, mt); err != nil {
				b.Fatal(err)
			}
		}
		for {
			var ws unix.WaitStatus
			wpid, err := unix.Wait4(-1, &ws, unix.WALL, nil)
			if err != nil {
				b.Fatal(err)
			}
			if ws.Stopped() {
				mt.stopped(wpid, ws)
				continue
			}
			if wpid == pid {
				return
			}
		}
	}
	b.Run("plain", func(b *testing.B) {
		for b.Loop() {
			run(b, &syscall.SysProcAttr{}, nil)
		}
	})
	for _, traced := range []bool{false, true} {
		name := "confined"
		if traced {
			name += "+traced"
		}
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				conf, err := newConfinement()
				if err != nil {
					b.Fatal(err)
				}
				l, err := startLauncher(conf)
				conf.close()
				if err != nil {
					b.Fatal(err)
				}
				var ex *wire.TrialExit
				l.do(func() {
					var mt *memTracer
					attr := &syscall.SysProcAttr{}
					if traced {
						mt, attr.Ptrace = &memTracer{}, true
					}
					run(b, attr, mt)
					ex = &wire.TrialExit{}
				})
				l.stop(time.Second)
				_ = ex
			}
		})
	}
}
