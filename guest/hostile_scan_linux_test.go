package guest

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/wire"
)

// secretText is what the file outside the workspace holds: the commands
// may not read it (on the seatbelt rung, a masked path), the guest may.
const secretText = "SECRET outside the workspace\n"

// hostileScan is a scan staging over a workspace and baseline in a temp
// dir, and beside them a dir outside holding secretText in "key".
func hostileScan(t *testing.T) (st *scanStaging, outside string) {
	t.Helper()
	dir := t.TempDir()
	ws, base := filepath.Join(dir, "workspace"), filepath.Join(dir, "baseline")
	outside = filepath.Join(dir, "outside")
	for _, d := range []string{ws, base, outside} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(outside, "key"), []byte(secretText), 0o600); err != nil {
		t.Fatal(err)
	}
	st, err := newScanStaging(ws, base)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.wsR.Close(); st.baseR.Close() })
	return st, outside
}

// holdsSecret reports the first regular file beneath dir holding secretText.
func holdsSecret(t *testing.T, dir string) string {
	t.Helper()
	found := ""
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, _ := os.ReadFile(p); bytes.Equal(b, []byte(secretText)) && found == "" {
				found = p
			}
		}
		return nil
	})
	return found
}

// TestScanRebaseSwappedDir: while the guest rebases and diffs, a process
// of the session's keeps exchanging a dir of the workspace with a symlink
// to a dir outside it (as a command's background process could: on the
// seatbelt rung the guest is unconfined and its commands are not). No
// rebase copies the outside file into the baseline, no diff reports it,
// and read_file never returns it: each fails or sees the dir.
func TestScanRebaseSwappedDir(t *testing.T) {
	st, outside := hostileScan(t)
	if err := os.Mkdir(filepath.Join(st.ws, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(st.ws, "d", "key"), []byte("the workspace's own\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(st.ws, "l")); err != nil {
		t.Fatal(err)
	}
	wsfd, err := unix.Open(st.ws, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(wsfd)
	s := &session{st: st, ws: st.ws}
	stop := testreq.SwapLoop(t, wsfd, "d", "l")
	var failed int
	for i := 0; i < 300; i++ {
		if err := st.rebase(); err != nil {
			failed++ // refused mid-swap: fine, as long as nothing leaked
		}
		if p := holdsSecret(t, st.base); p != "" {
			stop()
			t.Fatalf("rebase %d copied the file outside the workspace into the baseline as %s", i, p)
		}
		d, err := st.diff()
		if err != nil {
			continue
		}
		for _, w := range d.Writes {
			if b, err := s.readFile(wire.ReadFile{Path: w.Path}); err == nil && bytes.Equal(b, []byte(secretText)) {
				stop()
				t.Fatalf("diff %d: read_file %s returned the file outside the workspace", i, w.Path)
			}
		}
	}
	t.Logf("%d swaps; %d of 300 rebases refused mid-swap", stop(), failed)
}

// TestScanResetSwappedDir: while the guest resets the workspace from the
// baseline, a process keeps putting a symlink to a dir outside in place of
// each dir the guest makes: no file of the baseline's is ever written
// outside, and nothing there changes.
func TestScanResetSwappedDir(t *testing.T) {
	st, outside := hostileScan(t)
	if err := os.MkdirAll(filepath.Join(st.base, "d", "e"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"d/planted", "d/e/planted"} {
		if err := os.WriteFile(filepath.Join(st.base, p), []byte("from the baseline\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	wsfd, err := unix.Open(st.ws, unix.O_PATH|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(wsfd)
	done, swaps := make(chan struct{}), make(chan int)
	go func() {
		n := 0
		for {
			select {
			case <-done:
				swaps <- n
				return
			default:
			}
			// Errors are the race's: the guest removed or has not made d.
			unix.Symlinkat(outside, wsfd, "l")
			if unix.Renameat2(wsfd, "l", wsfd, "d", unix.RENAME_EXCHANGE) == nil {
				n++
			}
		}
	}()
	for i := 0; i < 300; i++ {
		st.reset()
		names, err := os.ReadDir(outside)
		if err != nil || len(names) != 1 || names[0].Name() != "key" {
			close(done)
			<-swaps
			t.Fatalf("reset %d wrote outside the workspace: %v (%v)", i, names, err)
		}
	}
	close(done)
	t.Logf("%d swaps", <-swaps)
	if b, _ := os.ReadFile(filepath.Join(outside, "key")); string(b) != secretText {
		t.Fatalf("the file outside was changed: %q", b)
	}
}

// TestScanWorkspaceReplaced: a command that replaces the workspace itself
// with a symlink to a dir outside (it may write where the workspace is)
// does not move the guest: its diff, rebase and read_file go on reading the
// dir it opened when the session started.
func TestScanWorkspaceReplaced(t *testing.T) {
	st, outside := hostileScan(t)
	if err := os.WriteFile(filepath.Join(st.ws, "key"), []byte("the workspace's own\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(st.ws, st.ws+".moved"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, st.ws); err != nil {
		t.Fatal(err)
	}
	s := &session{st: st, ws: st.ws}
	d, err := st.diff()
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Writes) != 1 || d.Writes[0].Path != "key" || d.Writes[0].Size != int64(len("the workspace's own\n")) {
		t.Errorf("diff %+v, want the workspace's own key", d.Writes)
	}
	if b, err := s.readFile(wire.ReadFile{Path: "key"}); err != nil || string(b) != "the workspace's own\n" {
		t.Errorf("read_file key = %q, %v; want the workspace's own", b, err)
	}
	if err := st.rebase(); err != nil {
		t.Fatal(err)
	}
	if p := holdsSecret(t, st.base); p != "" {
		t.Errorf("rebase copied the file outside into the baseline as %s", p)
	}
}
