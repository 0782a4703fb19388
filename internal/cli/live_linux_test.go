package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"strings"
	"sync"
	"testing"
)

// markerWriter is a CLI output that answers the command: when what it has
// received contains "ready", it writes "go" to the command's stdin. A command
// that waits for that answer finishes only if its output was passed on while
// it ran.
type markerWriter struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	once  sync.Once
	reply io.WriteCloser
}

func (m *markerWriter) Write(p []byte) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.buf.Write(p)
	if strings.Contains(m.buf.String(), "ready") {
		m.once.Do(func() { m.reply.Write([]byte("go\n")); m.reply.Close() })
	}
	return len(p), nil
}

func (m *markerWriter) String() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.buf.String()
}

// TestRunLiveOutput: `dryexec run` passes the command's stdout and stderr on
// while it runs (the command below waits, on its stdin, for an answer to its
// own "ready"; without live output it would time out), to stdout and stderr,
// or both to stderr with --json (stdout holds only the delta); the summary
// does not repeat them; --quiet turns it off and the summary shows them. The
// delta holds the output either way.
func TestRunLiveOutput(t *testing.T) {
	requireNS(t)
	tests := []struct {
		name        string
		flags       []string
		liveOn      string // "stdout", "stderr" or "" (none)
		wantSummary bool   // the summary shows the output
	}{
		{"live to the terminal", nil, "stdout", false},
		{"--json: live to stderr", []string{"--json"}, "stderr", false},
		{"--quiet", []string{"--quiet"}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir, home := t.TempDir(), t.TempDir()
			pr, pw := io.Pipe()
			out, errw := &markerWriter{reply: pw}, &markerWriter{reply: pw}
			script := `echo ready; echo warn >&2; if [ -n "$QUIET" ]; then echo go; else read x; echo "got $x"; fi`
			args := append([]string{"run", "--stdin", "--timeout", "30s", "-C", dir}, tt.flags...)
			quiet := ""
			if tt.liveOn == "" {
				quiet = "1"
				pw.Close() // nothing will answer
			}
			args = append(args, "--env", "QUIET="+quiet, "--", "sh", "-c", script)
			env := map[string]string{"DRYEXEC_HOME": home, "PATH": "/usr/bin:/bin", "NO_COLOR": "1"}
			code := Run(context.Background(), args, Env{Stdin: pr, Stdout: out, Stderr: errw, Getenv: func(k string) string { return env[k] }})
			if code == ExitInternal || code == ExitUsage || code == ExitCommandFailed {
				t.Fatalf("exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errw)
			}
			stdout, stderr := out.String(), errw.String()
			var d struct {
				Process struct{ Stdout, Stderr string }
			}
			if slices := tt.flags; len(slices) > 0 && slices[0] == "--json" {
				if err := json.Unmarshal([]byte(stdout), &d); err != nil {
					t.Fatalf("stdout is not only the delta: %v\n%s", err, stdout)
				}
				if d.Process.Stdout != "ready\ngot go\n" || d.Process.Stderr != "warn\n" {
					t.Errorf("the delta's output: %+v", d.Process)
				}
			}
			switch tt.liveOn {
			case "stdout":
				if !strings.HasPrefix(stdout, "ready\n") || !strings.Contains(stdout, "got go\n") || !strings.Contains(stderr, "warn\n") {
					t.Errorf("live output missing\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
				}
			case "stderr":
				if !strings.Contains(stderr, "ready\n") || !strings.Contains(stderr, "got go\n") || !strings.Contains(stderr, "warn\n") {
					t.Errorf("live output missing from stderr:\n%s", stderr)
				}
			case "":
				if strings.HasPrefix(stdout, "ready") || strings.Contains(stderr, "warn") {
					t.Errorf("--quiet still showed the output\nstdout:\n%s\nstderr:\n%s", stdout, stderr)
				}
			}
			if got := strings.Contains(stdout, "stdout:\n  ready\n"); got != tt.wantSummary {
				t.Errorf("summary shows the output: %v, want %v\n%s", got, tt.wantSummary, stdout)
			}
		})
	}
}
