package gvisor

import (
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/dryexec/dryexec"
)

// TestEmptyHostTmp: what a command writes in /tmp is in the delta even when
// the host's /tmp is empty (a daemon under systemd's PrivateTmp starts with
// one). runsc mounts a tmpfs of gVisor's memory over an empty /tmp unless
// the spec mounts something there: without the explicit bind, the write
// vanished and the delta said nothing changed. The test re-runs itself in a
// mount namespace of its own whose /tmp is a new, empty tmpfs.
func TestEmptyHostTmp(t *testing.T) {
	requireGVisor(t)
	if os.Getenv("DRYEXEC_TEST_EMPTY_TMP") == "" {
		if _, err := exec.LookPath("unshare"); err != nil {
			t.Fatal(err)
		}
		// The binary is beneath /tmp (go test's build dir), hidden once the
		// new tmpfs is mounted, and netsim's confinement names it by path: a
		// copy outside /tmp is run.
		dir, err := os.MkdirTemp("/run", "dryexec-empty-tmp-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(dir) })
		self := filepath.Join(dir, "gvisor.test")
		if err := copyFile(self, "/proc/"+strconv.Itoa(os.Getpid())+"/exe"); err != nil {
			t.Fatal(err)
		}
		cmd := exec.CommandContext(t.Context(), "unshare", "-m", "--propagation", "private", "sh", "-c",
			`mount -t tmpfs dryexec-empty-tmp /tmp && [ -z "$(ls -A /tmp)" ] && cd / && exec "$0" -test.run '^TestEmptyHostTmp$' -test.v`, self)
		cmd.Env = append(os.Environ(), "DRYEXEC_TEST_EMPTY_TMP=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the run under an empty /tmp: %v\n%s", err, out)
		}
		t.Logf("%s", out)
		return
	}
	d := runTrial(t, nil, "/", dryexec.TrialSpec{}, "sh", "-c", "echo x > /tmp/written-in-trial")
	if d.Process.ExitCode != 0 {
		t.Fatalf("exit %d: %s", d.Process.ExitCode, d.Process.Stderr)
	}
	for _, m := range d.Files {
		if m.Path == "/tmp/written-in-trial" {
			return
		}
	}
	t.Errorf("the file written in /tmp is not in the delta: %+v (warnings %q)", d.Files, d.Warnings)
}

// copyFile copies the executable at from to a new file to.
func copyFile(to, from string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}
