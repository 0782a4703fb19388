package store

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"syscall"

	"github.com/dryexec/dryexec"
)

// A spare is a trial directory made ahead, between trials, by a store that
// keeps one (KeepSpare: the daemon's): an empty directory named
// tr_….spare, flocked like a .partial being recorded, holding an empty
// delta.json already open for writing. A trial takes it at its first write
// (usually Save) instead of making its own, which spares the request path a
// mkdir, an open and a flock of the directory and the create of delta.json —
// two inode allocations on the store's file system, the costliest of the
// record's few system calls (mkdir alone 0.2–1 ms here at a load of 20).
// The taken directory is published under the trial's id by the same single
// rename as a .partial; until then nobody reads it. A spare left by a
// crash is unlocked, and removed by the next sweep like a .partial.
type spare struct {
	dir   string
	lock  *os.File
	delta *os.File
}

// spares is a store's spare, if it keeps one.
type spares struct {
	mu      sync.Mutex
	on      bool   // KeepSpare was called and DropSpare not since
	ready   *spare // made and not taken
	filling bool   // a refill is running
	wg      sync.WaitGroup
}

// KeepSpare has the store keep a spare trial directory ready, made now and
// again after each trial takes it, off the trial's path (a goroutine). For a
// long-lived process that records many trials (the daemon); a process that
// records one trial has no use for it. DropSpare removes it.
func (s *Store) KeepSpare() {
	s.spares.mu.Lock()
	s.spares.on = true
	s.spares.mu.Unlock()
	s.refillSpare()
}

// DropSpare stops keeping a spare and removes the one ready, once any refill
// in flight is done.
func (s *Store) DropSpare() {
	s.spares.mu.Lock()
	s.spares.on = false
	s.spares.mu.Unlock()
	s.spares.wg.Wait()
	s.spares.mu.Lock()
	sp := s.spares.ready
	s.spares.ready = nil
	s.spares.mu.Unlock()
	if sp != nil {
		sp.remove()
	}
}

// takeSpare returns the ready spare, nil if none. The next one is made
// once the trial that took it is saved (Trial.Save): not beside the trial,
// whose command and guest want the CPUs.
func (s *Store) takeSpare() *spare {
	s.spares.mu.Lock()
	sp := s.spares.ready
	s.spares.ready = nil
	s.spares.mu.Unlock()
	return sp
}

// refillSpare starts making a spare in a goroutine if the store keeps one
// and has none ready or in the making.
func (s *Store) refillSpare() {
	s.spares.mu.Lock()
	defer s.spares.mu.Unlock()
	if !s.spares.on || s.spares.ready != nil || s.spares.filling {
		return
	}
	s.spares.filling = true
	s.spares.wg.Add(1)
	go func() {
		defer s.spares.wg.Done()
		sp, err := s.makeSpare()
		s.spares.mu.Lock()
		s.spares.filling = false
		keep := err == nil && s.spares.on && s.spares.ready == nil
		if keep {
			s.spares.ready = sp
		}
		s.spares.mu.Unlock()
		if err == nil && !keep {
			sp.remove()
		}
		// A spare that cannot be made (a full disk) is no error of any
		// trial: each makes its own directory as without a spare, and says
		// why if that fails too.
	}()
}

// makeSpare makes one spare.
func (s *Store) makeSpare() (*spare, error) {
	dir := filepath.Join(s.dir, "trials", dryexec.NewTrialID()+".spare")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	lock, err := lockDir(dir)
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	delta, err := createInPlace(filepath.Join(dir, "delta.json"))
	if err != nil {
		os.RemoveAll(dir)
		lock.Close()
		return nil, err
	}
	return &spare{dir: dir, lock: lock, delta: delta}, nil
}

func (sp *spare) remove() {
	sp.delta.Close()
	os.RemoveAll(sp.dir)
	sp.lock.Close()
}

// createInPlace creates path (it must not exist) for writing. syscall.Open
// and os.NewFile rather than os.OpenFile: a blocking fd is not offered to
// the runtime's poller (four fcntl and a failing epoll_ctl per file,
// measured with strace in the trial's path).
func createInPlace(path string) (*os.File, error) {
	fd, err := syscall.Open(path, syscall.O_WRONLY|syscall.O_CREAT|syscall.O_EXCL|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store: %w", &os.PathError{Op: "open", Path: path, Err: err})
	}
	return os.NewFile(uintptr(fd), path), nil
}
