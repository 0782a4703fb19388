package seccomp

import (
	"context"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// BenchmarkCall measures one system call on a thread without the filter, an
// allowed call under it (what every call of a sandboxed process pays), and a
// refused one (the round trip through the supervisor: notification, report,
// answer).
func BenchmarkCall(b *testing.B) {
	b.Run("unfiltered", func(b *testing.B) {
		for b.Loop() {
			unix.Syscall(unix.SYS_GETPPID, 0, 0, 0)
		}
	})
	filteredLoop := func(b *testing.B, nr uintptr) {
		prog, err := Default().Program(true)
		if err != nil {
			b.Fatal(err)
		}
		fdc := make(chan int, 1)
		done := make(chan struct{})
		go func() {
			defer close(done)
			runtime.LockOSThread() // never unlocked: the thread ends with the filter
			fd, err := Install(prog, true)
			fdc <- fd
			if err != nil {
				return
			}
			for b.Loop() {
				unix.Syscall(nr, 0, 0, 0)
			}
		}()
		fd := <-fdc
		if fd < 0 {
			b.Fatal("install failed")
		}
		srv := &Server{Profile: Default(), Report: func(*Event) {}}
		go srv.Serve(context.Background(), fd)
		<-done
	}
	b.Run("allowed", func(b *testing.B) { filteredLoop(b, unix.SYS_GETPPID) })
	b.Run("refused", func(b *testing.B) { filteredLoop(b, unix.SYS_KEYCTL) })
}
