package vm

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestUpperDrivePrivate: the drive a VM writes its upper dir back on (what
// the command wrote) is under the dryexec home's tmp/, which every
// sandbox's view hides, not in the host's /tmp, which every sandbox sees;
// it goes with the trial; and a crashed process's drive is removed when
// the next one is made, a live trial's is not.
func TestUpperDrivePrivate(t *testing.T) {
	home := t.TempDir()
	t.Setenv("DRYEXEC_HOME", home)
	t.Setenv("TMPDIR", t.TempDir())
	live, err := newUpperDrive(1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	if !strings.HasPrefix(live.Name(), filepath.Join(home, "tmp")+"/") {
		t.Fatalf("the upper drive is at %s, not under the home's tmp/", live.Name())
	}
	if fi, err := os.Stat(filepath.Dir(live.Name())); err != nil || fi.Mode().Perm() != 0o700 {
		t.Fatalf("the drive's dir: %v, %v; want 0700", fi, err)
	}
	// A trial of a process that is gone (reaped: no zombie holds its pid).
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	crashed := filepath.Join(home, "tmp", upperDrivePattern+strconv.Itoa(gone.Process.Pid)+"-1")
	if err := os.Mkdir(crashed, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(crashed+"/upper", []byte("what a crashed trial wrote"), 0o600); err != nil {
		t.Fatal(err)
	}
	next, err := newUpperDrive(1<<20, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer next.Close()
	if _, err := os.Stat(crashed); err == nil {
		t.Errorf("a crashed trial's upper drive was left")
	}
	if _, err := os.Stat(live.Name()); err != nil {
		t.Errorf("a live trial's upper drive was removed: %v", err)
	}
	tr := &trial{upperDrive: next}
	tr.closeImage()
	if _, err := os.Stat(filepath.Dir(next.Name())); err == nil {
		t.Errorf("the drive's dir outlived its trial")
	}
}
