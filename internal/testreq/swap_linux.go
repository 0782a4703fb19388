package testreq

import (
	"testing"

	"golang.org/x/sys/unix"
)

// SwapLoop exchanges the names a and b beneath dirfd (RENAME_EXCHANGE) in
// a loop, as a hostile process racing a check and a use would, until the
// returned stop is called; stop returns how many swaps were made, so a test
// can log that the race ran.
func SwapLoop(t testing.TB, dirfd int, a, b string) (stop func() int) {
	done, swapped := make(chan struct{}), make(chan int)
	go func() {
		n := 0
		defer func() { swapped <- n }()
		for {
			select {
			case <-done:
				return
			default:
			}
			if err := unix.Renameat2(dirfd, a, dirfd, b, unix.RENAME_EXCHANGE); err != nil {
				t.Error(err)
				return
			}
			n++
		}
	}()
	return func() int {
		close(done)
		return <-swapped
	}
}
