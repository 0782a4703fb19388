//go:build unix

package guest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/wire"
)

// TestCommandPrefix: every process a session starts for a command, a shell
// exec's shell and a Python runner, is started through
// SessionStart.CommandPrefix (the seatbelt rung's sandbox-exec), which
// execs it in place: the command's pid is the wrapper's. Here a harmless
// wrapper takes sandbox-exec's place: it logs its pid and what it runs.
// Without a prefix nothing goes through it.
func TestCommandPrefix(t *testing.T) {
	dir := t.TempDir()
	wrap, log := filepath.Join(dir, "wrap"), filepath.Join(dir, "log")
	// Like `sandbox-exec -p PROFILE -- CMD...`: an argument, "--", the command.
	script := "#!/bin/sh\nlog=$1; shift; [ \"$1\" = -- ] || exit 99; shift\necho \"$$ $1\" >>\"$log\"\nexec \"$@\"\n"
	if err := os.WriteFile(wrap, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	open := func(prefix []string) *session {
		ws, base := t.TempDir(), t.TempDir()
		s := &session{cfg: wire.SessionStart{Rung: "host", Workspace: ws, Baseline: base, OutputCap: 1 << 16, CommandPrefix: prefix}}
		if err := s.start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.closePython(); s.close() })
		s.shell.path = "/bin/sh"
		return s
	}
	logged := func() string {
		b, err := os.ReadFile(log)
		if err != nil && !os.IsNotExist(err) {
			t.Fatal(err)
		}
		return string(b)
	}
	ctx := context.Background()

	s := open(nil)
	if res := s.execShell(ctx, &wire.ExecShell{Command: "echo plain"}); res.ExitCode != 0 || res.Stdout != "plain\n" {
		t.Fatalf("no prefix: %+v", res)
	}
	if got := logged(); got != "" {
		t.Fatalf("no prefix, yet the wrapper ran: %q", got)
	}

	s = open([]string{wrap, log, "--"})
	res := s.execShell(ctx, &wire.ExecShell{Command: "echo $$"})
	if res.ExitCode != 0 {
		t.Fatalf("exec under the prefix: %+v", res)
	}
	if want := strings.TrimSpace(res.Stdout) + " /bin/sh\n"; logged() != want {
		t.Fatalf("wrapper's log %q, want %q (the shell, exec'd in the wrapper's place)", logged(), want)
	}
	// The shell's state still comes back through the fd the guest hands it.
	if res := s.execShell(ctx, &wire.ExecShell{Command: "cd sub 2>/dev/null || { mkdir sub && cd sub; }"}); res.ExitCode != 0 || res.Cwd != filepath.Join(s.ws, "sub") {
		t.Fatalf("cwd through the prefix: %+v", res)
	}
	os.Remove(log)

	py := testreq.NeedPython(t)
	pr, err := s.execPython(ctx, &wire.ExecPython{Code: "import os\nprint(os.getpid())", Fresh: true})
	if err != nil || !pr.OK || len(pr.Prints) != 1 {
		t.Fatalf("python under the prefix: %+v, %v", pr, err)
	}
	if want := fmt.Sprintf("%s %s\n", strings.TrimSpace(pr.Prints[0].Text), py); logged() != want {
		t.Fatalf("wrapper's log %q, want %q (the runner, exec'd in the wrapper's place)", logged(), want)
	}
}
