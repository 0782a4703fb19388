package testwait

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

func TestUntil(t *testing.T) {
	tests := []struct {
		name    string
		after   int // cond holds from this call on; -1: never
		want    error
		minCall int
	}{
		{"at once", 0, nil, 1},
		{"after a few polls", 3, nil, 4},
		{"never", -1, ErrTimeout, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			calls := 0
			err := Until(50*time.Millisecond, func() bool {
				calls++
				return tt.after >= 0 && calls > tt.after
			})
			if !errors.Is(err, tt.want) || calls < tt.minCall {
				t.Fatalf("Until = %v after %d calls, want %v after at least %d", err, calls, tt.want, tt.minCall)
			}
		})
	}
}

// TestFile waits for a marker a real process writes.
func TestFile(t *testing.T) {
	p := filepath.Join(t.TempDir(), "marker")
	cmd := exec.Command("sh", "-c", `read _; echo > "$0"`, p)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Wait()
	if Until(20*time.Millisecond, func() bool { _, err := os.Stat(p); return err == nil }) == nil {
		t.Fatal("the marker exists before the process was told to write it")
	}
	in.Write([]byte("go\n"))
	in.Close()
	File(t, 10*time.Second, p)
}
