package cli

import (
	"strings"
	"testing"
)

// TestRunExitStatusCommand: --exit-status command exits with the command's
// own status, the decision still in the JSON; dryexec's own errors keep
// theirs.
func TestRunExitStatusCommand(t *testing.T) {
	requireNS(t)
	home := t.TempDir()
	tests := []struct {
		name   string
		args   []string
		code   int
		choice string
		err    string
	}{
		{"success", []string{"sh", "-c", "echo x > x"}, 0, "auto_commit", ""},
		{"failure", []string{"sh", "-c", "exit 7"}, 7, "review", ""},
		{"a code that means review otherwise", []string{"sh", "-c", "exit 3"}, 3, "review", ""},
		{"blocked but succeeded", []string{"sh", "-c", "mkdir -p .ssh; echo k > .ssh/authorized_keys"}, 0, "block", ""},
		{"not found", []string{"no-such-cmd-dryexec"}, 127, "review", ""},
		{"signal", []string{"sh", "-c", "kill -9 $$"}, 137, "review", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := cli(t, home, append([]string{"run", "--no-store", "--json", "-C", t.TempDir(), "--exit-status", "command", "--"}, tt.args...)...)
			if code != tt.code {
				t.Fatalf("code %d, want %d\n%s%s", code, tt.code, out, errs)
			}
			if d := decode(t, out); d.Decision.Choice != tt.choice || d.Process.ExitCode != tt.code {
				t.Fatalf("decision %s (want %s), process exit %d", d.Decision.Choice, tt.choice, d.Process.ExitCode)
			}
		})
	}
	for _, tt := range []struct {
		name string
		args []string
		code int
		err  string
	}{
		{"timeout", []string{"run", "--no-store", "--exit-status", "command", "--timeout", "200ms", "--", "sleep", "5"}, 124, ""},
		{"the default is the decision", []string{"run", "--no-store", "--", "sh", "-c", "exit 7"}, ExitCommandFailed, ""},
		{"decision named", []string{"run", "--no-store", "--exit-status", "decision", "--", "sh", "-c", "exit 7"}, ExitCommandFailed, ""},
		{"a bad value is usage", []string{"run", "--exit-status", "cmd", "--", "true"}, ExitUsage, "want decision (the default) or command"},
		{"usage errors keep their code", []string{"run", "--exit-status", "command", "-C", "/no/such/dir", "--", "true"}, ExitUsage, "not a directory"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := cli(t, home, tt.args...)
			if code != tt.code || !strings.Contains(errs, tt.err) {
				t.Fatalf("code %d (want %d), stderr %q (want %q)\n%s", code, tt.code, errs, tt.err, out)
			}
		})
	}
}
