package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A park's record swapped with a FIFO in a loop (RENAME_EXCHANGE, as
// anything that can write the store could) while the daemon reads it:
// every read ends, damaged or not, and none blocks on the FIFO.
func TestParkRecordSwappedForFIFO(t *testing.T) {
	store := t.TempDir()
	id := "se_" + strings.Repeat("s", 20)
	dir := testPark(t, store, id, time.Now().Add(time.Hour), nil)
	fifo := filepath.Join(dir, "x")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	stop, swapped := make(chan struct{}), make(chan int)
	go func() {
		n := 0
		defer func() { swapped <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if err := unix.Renameat2(unix.AT_FDCWD, fifo, unix.AT_FDCWD, filepath.Join(dir, parkRecordFile), unix.RENAME_EXCHANGE); err != nil {
				t.Error(err)
				return
			}
			n++
		}
	}()
	good, damaged := 0, 0
	for range 5000 {
		if _, err := readParkRecord(dir, id); err == nil {
			good++
		} else {
			damaged++
		}
	}
	close(stop)
	t.Logf("%d swaps; %d reads good, %d damaged", <-swapped, good, damaged)
	if _, err := os.Lstat(dir); err != nil {
		t.Fatal(err)
	}
}
