package server

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/internal/testreq"
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
	d, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(d)
	stop := testreq.SwapLoop(t, d, "x", parkRecordFile)
	good, damaged := 0, 0
	for range 5000 {
		if _, err := readParkRecord(dir, id); err == nil {
			good++
		} else {
			damaged++
		}
	}
	t.Logf("%d swaps; %d reads good, %d damaged", stop(), good, damaged)
	if _, err := os.Lstat(dir); err != nil {
		t.Fatal(err)
	}
}
