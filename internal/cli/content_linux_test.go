package cli

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// cliWith runs the CLI in-process with a private DRYEXEC_HOME and the extra
// variables in vars.
func cliWith(t *testing.T, home string, vars map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	env := map[string]string{"DRYEXEC_HOME": home, "PATH": "/usr/local/bin:/usr/bin:/bin", "NO_COLOR": "1"}
	for k, v := range vars {
		env[k] = v
	}
	code = Run(context.Background(), args, Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb,
		Getenv: func(k string) string { return env[k] }})
	return code, out.String(), errb.String()
}

// TestRunContentLimits: --content-cap and DRYEXEC_STORE_QUOTA reach the
// store; a file past them is in the delta, not kept, with why, and the
// decision is review, not auto_commit, so --commit applies nothing. Bad
// values are usage errors, before any trial.
func TestRunContentLimits(t *testing.T) {
	requireNS(t)
	tests := []struct {
		name   string
		vars   map[string]string
		flags  []string
		reason string
	}{
		{"--content-cap", nil, []string{"--content-cap", "1K"}, "content cap of 1024 bytes"},
		{"DRYEXEC_TRIAL_CONTENT_CAP", map[string]string{"DRYEXEC_TRIAL_CONTENT_CAP": "1K"}, nil, "content cap of 1024 bytes"},
		{"DRYEXEC_STORE_QUOTA", map[string]string{"DRYEXEC_STORE_QUOTA": "1K"}, nil, "quota"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			home, work := t.TempDir(), t.TempDir()
			args := append([]string{"run", "--json", "--commit", "-C", work}, tt.flags...)
			code, out, errb := cliWith(t, home, tt.vars, append(args, "--", "sh", "-c", "head -c 4096 /dev/urandom > big")...)
			if code != ExitRefused {
				t.Fatalf("exit %d, want %d (--commit refused): %s", code, ExitRefused, errb)
			}
			d := decode(t, out)
			if len(d.Files) != 1 || d.Files[0].Kept() || !strings.Contains(d.Files[0].ContentReason, tt.reason) ||
				d.Files[0].Size != 4096 || d.Files[0].SHA256 == "" {
				t.Fatalf("files %+v, want big listed, hashed, not kept (%s)", d.Files, tt.reason)
			}
			if d.Decision.Choice != "review" || !strings.Contains(strings.Join(d.Decision.Reasons, "\n"), "was not kept") {
				t.Errorf("decision %+v", d.Decision)
			}
			if !strings.Contains(errb, "not committing") {
				t.Errorf("--commit did not refuse: %s", errb)
			}
		})
	}
	for _, bad := range []struct {
		vars  map[string]string
		flags []string
	}{
		{nil, []string{"--content-cap", "lots"}},
		{map[string]string{"DRYEXEC_STORE_QUOTA": "12X"}, nil},
		{map[string]string{"DRYEXEC_STORE_MIN_FREE": "0"}, nil},
	} {
		args := append([]string{"run"}, bad.flags...)
		code, _, errb := cliWith(t, t.TempDir(), bad.vars, append(args, "--", "true")...)
		if code != ExitUsage {
			t.Errorf("%v %v: exit %d (%s), want usage", bad.vars, bad.flags, code, strings.TrimSpace(errb))
		}
	}
}
