package server_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/dryexec/dryexec/internal/testreq"
)

// The Python SDK's tests (sdk/python/tests, `python3 -m unittest`) against a
// real daemon: the SDK starts this test binary as `dryexec serve` (DRYEXEC_BIN),
// exactly as it would start the real binary.
func TestPythonSDK(t *testing.T) {
	requireNS(t)
	py := testreq.NeedPython(t)
	root, err := filepath.Abs("../sdk/python")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, py, "-m", "unittest", "discover", "-s", "tests", "-t", ".", "-v")
	cmd.Dir = root
	home := t.TempDir()
	cmd.Env = append(os.Environ(), "DRYEXEC_BIN="+os.Args[0], asCLI+"=1", "PYTHONPATH="+root,
		"DRYEXEC_HOME="+filepath.Join(home, "home"), "PYTHONDONTWRITEBYTECODE=1", "TMPDIR="+home)
	if os.Geteuid() == 0 {
		// tests/test_images.py runs on this image (images need root).
		cmd.Env = append(cmd.Env, "DRYEXEC_TEST_IMAGE="+pythonTestImage(t))
	}
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil {
		t.Fatalf("python tests: %v", err)
	}
}
