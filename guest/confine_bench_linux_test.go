package guest

import (
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/wire"
)

// BenchmarkStartTrue measures what confinement adds to starting one command:
// plain fork+exec+wait of /bin/true; the same through a command stub started
// from a freshly confined launcher thread (filter compiled, Landlock ruleset
// built, thread confined, supervisor started and stopped: a trial's whole
// fixed cost); and with the memory tracer on as well. Each stub kind (native,
// guest) runs separately.
func BenchmarkStartTrue(b *testing.B) {
	b.Run("plain", func(b *testing.B) {
		for b.Loop() {
			pid, err := syscall.ForkExec("/bin/true", []string{"true"}, &syscall.ProcAttr{})
			if err != nil {
				b.Fatal(err)
			}
			var ws unix.WaitStatus
			if _, err := unix.Wait4(pid, &ws, 0, nil); err != nil {
				b.Fatal(err)
			}
		}
	})
	r := &wire.TrialRun{Argv: []string{"/bin/true"}, Cwd: "/"}
	for kind, exe := range stubExes(b) {
		for _, traced := range []bool{false, true} {
			name := "confined/" + kind
			if traced {
				name += "+traced"
			}
			b.Run(name, func(b *testing.B) {
				for b.Loop() {
					conf, err := newConfinement(false)
					if err != nil {
						b.Fatal(err)
					}
					l, err := startLauncher(conf)
					conf.close()
					if err != nil {
						b.Fatal(err)
					}
					l.do(func() { runThroughStub(b, exe, r, "", traced) })
					l.stop(time.Second)
				}
			})
		}
	}
}
