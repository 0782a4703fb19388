package cli

import (
	"github.com/dryexec/dryexec/internal/localrun"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseBytes(t *testing.T) {
	tests := []struct {
		in   string
		want int64
		bad  bool
	}{
		{"", 0, false}, {"-1", -1, false}, {"4096", 4096, false}, {"64K", 64 << 10, false},
		{"512M", 512 << 20, false}, {"512MiB", 512 << 20, false}, {"2g", 2 << 30, false}, {"1GB", 1 << 30, false},
		{"0", 0, true}, {"-5", 0, true}, {"12X", 0, true}, {"M", 0, true}, {"9999999999G", 0, true},
	}
	for _, tt := range tests {
		got, err := localrun.ParseBytes(tt.in)
		if (err != nil) != tt.bad || got != tt.want {
			t.Errorf("localrun.ParseBytes(%q) = %d, %v", tt.in, got, err)
		}
	}
}

// TestRunLimitsMasksEnvFlags: the flags reach the trial — --env NAME passes
// a variable through and NAME=VALUE sets one, nothing else of the caller's
// leaks, --mask hides a file and records the read, --no-default-masks and
// --pids/--memory are taken; bad values are usage errors.
func TestRunLimitsMasksEnvFlags(t *testing.T) {
	requireNS(t)
	home := t.TempDir()
	work := t.TempDir()
	key := filepath.Join(work, "deploy.key")
	if err := os.WriteFile(key, []byte("SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, out, errb := cli(t, home, "run", "--json", "--no-store", "-C", work, "--env", "SECRET_TOKEN", "--env", "X=1",
		"--mask", key, "--no-default-masks", "--pids", "128", "--memory", "256M", "--cpus", "1",
		"--", "sh", "-c", `cat deploy.key; echo "$SECRET_TOKEN $X"`)
	if code != 0 && code != ExitReview && code != ExitBlock {
		t.Fatalf("exit %d: %s", code, errb)
	}
	d := decode(t, out)
	if d.Process.Stdout != "hunter2 1\n" {
		t.Errorf("stdout %q", d.Process.Stdout)
	}
	if len(d.Violations) != 1 || d.Violations[0].Kind != "secret" || d.Violations[0].Detail != key {
		t.Errorf("violations %+v", d.Violations)
	}
	if _, ok := d.Action.Env["DRYEXEC_HOME"]; ok {
		t.Error("a variable that was not named leaked into the sandbox")
	}
	for _, bad := range [][]string{{"--memory", "lots"}, {"--memory", "1M"}, {"--pids", "3"}, {"--mask", "relative"}, {"--env", "A*B*"}} {
		args := append([]string{"run", "--no-store"}, bad...)
		code, _, errb := cli(t, home, append(args, "--", "true")...)
		if code != ExitUsage {
			t.Errorf("%v: exit %d (%s), want usage", bad, code, strings.TrimSpace(errb))
		}
	}
}
