package seccomp

import (
	"context"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// TestHandled: a Handled call goes to Server.Handle, whose quick answer, slow
// answer (from a goroutine, with Quiesce waiting for it) and CONTINUE the
// caller gets; it is never reported; and a program without a supervisor
// lets it run.
func TestHandled(t *testing.T) {
	p := Default()
	p.Handle("test", "renameat2")
	if got := p.Names(); len(got) != len(Default().Names()) {
		t.Errorf("Names lists a handled call: %v", got)
	}
	prog, err := p.Program(true)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	res := make(chan []unix.Errno, 1)
	fdc := make(chan int, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the filter dies with the thread
		fd, err := Install(prog, true)
		if err != nil {
			t.Error(err)
			fdc <- -1
			return
		}
		fdc <- fd
		var out []unix.Errno
		for _, flags := range []uint{1, 2, 8} { // the handler keys on the flags
			e := unix.Renameat2(unix.AT_FDCWD, dir+"/nope", unix.AT_FDCWD, dir+"/nope2", flags)
			out = append(out, errnoOf(e))
		}
		res <- out
	}()
	fd := <-fdc
	if fd < 0 {
		t.FailNow()
	}
	slowDone := false
	var reported int
	srv := &Server{Profile: p, Report: func(*Event) { reported++ }}
	srv.Handle = func(_ context.Context, n *Notification) (Answer, func() Answer) {
		if !n.Valid() {
			t.Error("a pending call is not valid")
		}
		switch n.Args[4] {
		case 1:
			return Answer{Errno: unix.EXDEV}, nil
		case 2:
			return Answer{}, func() Answer { slowDone = true; return Answer{Errno: unix.ENOTEMPTY} }
		}
		return Answer{Continue: true}, nil
	}
	served := make(chan error, 1)
	go func() { served <- srv.Serve(context.Background(), fd) }()
	got := <-res
	srv.Quiesce()
	if !slowDone {
		t.Error("Quiesce returned before the slow answer")
	}
	if err := <-served; err != nil {
		t.Fatal(err)
	}
	// 8 is not a renameat2 flag: the kernel's own EINVAL shows it ran.
	want := []unix.Errno{unix.EXDEV, unix.ENOTEMPTY, unix.EINVAL}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("call %d: %v, want %v", i, got[i], want[i])
		}
	}
	if reported != 0 {
		t.Errorf("%d handled calls reported", reported)
	}
	// Without a supervisor (notify false) a handled call runs.
	prog, err = p.Program(false)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan unix.Errno, 1)
	go func() {
		runtime.LockOSThread()
		if _, err := Install(prog, false); err != nil {
			t.Error(err)
		}
		done <- errnoOf(unix.Renameat2(unix.AT_FDCWD, dir+"/nope", unix.AT_FDCWD, dir+"/nope2", 0))
	}()
	if e := <-done; e != unix.ENOENT {
		t.Errorf("without a supervisor: %v, want the kernel's ENOENT", e)
	}
}

func errnoOf(err error) unix.Errno {
	e, _ := err.(unix.Errno)
	return e
}
