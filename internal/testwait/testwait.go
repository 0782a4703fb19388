// Package testwait owns how tests wait for an event: they poll for a marker
// the event leaves (a process, a file, a line of output, a counter) until a
// deadline, instead of sleeping for a guess and hoping the event came first.
// A sleep passes when the event is late on a loaded machine only by luck, and
// passes when it never comes at all if the test checks nothing after it.
//
// It is a test helper: only _test files import it, and it imports nothing of
// dryexec's, so any package's in-package tests can use it.
package testwait

import (
	"errors"
	"os"
	"testing"
	"time"
)

// Poll intervals: the first checks come quickly (most markers show within a
// few milliseconds), later ones back off so a long wait does not spin a shared
// CPU.
const (
	firstPoll = time.Millisecond
	maxPoll   = 20 * time.Millisecond
)

// ErrTimeout is what Until returns when cond never held.
var ErrTimeout = errors.New("testwait: timed out")

// Until polls cond until it holds (nil) or timeout passes (ErrTimeout), for
// callers that report the failure themselves.
func Until(timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for d := firstPoll; ; d = min(2*d, maxPoll) {
		if cond() {
			return nil
		}
		if time.Now().After(deadline) {
			return ErrTimeout
		}
		time.Sleep(d)
	}
}

// For polls cond until it holds, and fails t, saying what it waited for,
// when timeout passes first.
func For(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if Until(timeout, cond) != nil {
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}

// File waits until path exists (a command's marker file).
func File(t testing.TB, timeout time.Duration, path string) {
	t.Helper()
	For(t, timeout, path+" to exist", func() bool {
		_, err := os.Lstat(path)
		return err == nil
	})
}
