package cli

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/dryexec/dryexec/internal/testhooks"
	"github.com/dryexec/dryexec/internal/testreq"
)

// TestReleaseIgnoresCrashPoints builds the CLI as a release is built (no
// tags) and commits a trial with DRYEXEC_TEST_CRASH_AT set: the commit
// completes. The same steps with a build carrying the test hooks are killed
// at the crash point, which shows the variable reaches the commit where the
// hooks are compiled in, so the release build's success is no accident.
func TestReleaseIgnoresCrashPoints(t *testing.T) {
	requireNS(t)
	goTool := testreq.NeedTool(t, "go")
	tests := []struct {
		name       string
		tags       string
		wantKilled bool
	}{
		{"release", "", false},
		{"testhooks", testhooks.Tag, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := t.TempDir()
			bin := filepath.Join(base, "dryexec")
			build := exec.Command(goTool, "build", "-tags", tt.tags, "-o", bin, "../../cmd/dryexec")
			build.Env = append(os.Environ(), "CGO_ENABLED=0")
			if out, err := build.CombinedOutput(); err != nil {
				t.Fatalf("building dryexec: %v\n%s", err, out)
			}
			work, home := filepath.Join(base, "work"), filepath.Join(base, "home")
			if err := os.Mkdir(work, 0o755); err != nil {
				t.Fatal(err)
			}
			env := []string{"PATH=/usr/bin:/bin", "HOME=" + home, "DRYEXEC_HOME=" + home + "/state"}
			run := exec.Command(bin, "run", "--json", "-C", work, "--", "sh", "-c", "echo new > f")
			run.Env = env
			out, err := run.Output()
			if err != nil {
				t.Fatalf("run: %v\n%s", err, out)
			}
			d := decode(t, string(out))
			commit := exec.Command(bin, "commit", d.TrialID)
			commit.Env = append(env, "DRYEXEC_TEST_CRASH_AT=1")
			out, err = commit.CombinedOutput()
			var ee *exec.ExitError
			killed := errors.As(err, &ee) && ee.ProcessState.String() == "signal: killed"
			if killed != tt.wantKilled {
				t.Fatalf("commit with DRYEXEC_TEST_CRASH_AT=1: killed %v, want %v (%v)\n%s", killed, tt.wantKilled, err, out)
			}
			if !tt.wantKilled {
				if err != nil {
					t.Fatalf("commit: %v\n%s", err, out)
				}
				if b, err := os.ReadFile(filepath.Join(work, "f")); err != nil || string(b) != "new\n" {
					t.Fatalf("the commit did not apply: %q %v", b, err)
				}
			}
		})
	}
}
