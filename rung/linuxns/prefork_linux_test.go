package linuxns

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
)

// TestPreforkSameAsFork: a pooled sandbox starts its command from the
// process it started ahead (guest/zygote_linux.go); what the command sees
// and what the delta says must be what a cold trial, which forks the
// command, gives: exit status, output, stdin, descriptors, identity,
// confinement, session, memory accounting.
func TestPreforkSameAsFork(t *testing.T) {
	requireNS(t)
	dir := t.TempDir()
	var mu sync.Mutex
	var phases []string
	r := &Rung{Trace: func(p string) {
		mu.Lock()
		phases = append(phases, p)
		mu.Unlock()
	}}
	p, err := NewPool(context.Background(), r, PoolOptions{Size: 1, Spec: dryexec.TrialSpec{Action: dryexec.Action{Cwd: dir}}})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := os.WriteFile(dir+"/bad", []byte("\x00\x01 not a program"), 0o755); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name  string
		argv  []string
		stdin string
		// refused: the guest finds the command cannot run before it
		// would ask the pre-started process.
		refused bool
	}{
		{"true", []string{"/bin/true"}, "", false},
		{"exit code", []string{"sh", "-c", "exit 3"}, "", false},
		{"signal", []string{"sh", "-c", "kill -TERM $$"}, "", false},
		{"not found", []string{"no-such-command-here"}, "", true},
		{"not executable", []string{"/etc/passwd"}, "", true},
		{"exec fails", []string{"./bad"}, "", false},
		{"stdin null", []string{"sh", "-c", "readlink /proc/self/fd/0; cat"}, "", false},
		{"stdin", []string{"sh", "-c", "cat; echo"}, "from the caller", false},
		{"descriptors", []string{"sh", "-c", "ls /proc/self/fd | sort -n | tr '\\n' ' '"}, "", false},
		{"identity", []string{"sh", "-c", "id; cat /proc/self/uid_map /proc/self/gid_map"}, "", false},
		{"confinement", []string{"sh", "-c", "grep -E '^(NoNewPrivs|Seccomp|CapEff|CapBnd):' /proc/self/status"}, "", false},
		{"session leader", []string{"sh", "-c", "read -r pid comm state ppid pgrp sess rest < /proc/self/stat; [ \"$sess\" = \"$$\" ] && echo leader"}, "", false},
		{"environment", []string{"env"}, "", false},
		{"cwd", []string{"pwd"}, "", false},
		{"writes", []string{"sh", "-c", "echo x > f; mkdir d; sh -c 'echo y > d/g'"}, "", false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			spec := func() dryexec.TrialSpec {
				s := dryexec.TrialSpec{Action: dryexec.Action{Argv: c.argv, Cwd: dir, Env: testPath}}
				if c.stdin != "" {
					s.Stdin = strings.NewReader(c.stdin)
				}
				return s
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cold, err := (&Rung{}).Trial(ctx, spec())
			if err != nil {
				t.Fatal(err)
			}
			waitReady(t, p, 1)
			mu.Lock()
			phases = nil
			mu.Unlock()
			warm, err := p.Trial(ctx, spec())
			if err != nil {
				t.Fatal(err)
			}
			validate(t, warm)
			mu.Lock()
			prefork := strings.Contains(strings.Join(phases, " "), "prefork")
			mu.Unlock()
			if prefork == c.refused {
				t.Fatalf("pre-started process used: %v, want %v (phases %v)", prefork, !c.refused, phases)
			}
			cp, wp := cold.Process, warm.Process
			if cp.ExitCode != wp.ExitCode || cp.Signal != wp.Signal || cp.TimedOut != wp.TimedOut {
				t.Errorf("exit: cold %d %q %v, pooled %d %q %v", cp.ExitCode, cp.Signal, cp.TimedOut, wp.ExitCode, wp.Signal, wp.TimedOut)
			}
			if cp.Stdout != wp.Stdout || cp.Stderr != wp.Stderr {
				t.Errorf("output:\ncold   %q / %q\npooled %q / %q", cp.Stdout, cp.Stderr, wp.Stdout, wp.Stderr)
			}
			// The pre-started process is a Go program: counted, its pages
			// (a few MiB of runtime) would dwarf any of these commands'.
			if cold.Memory.Method != warm.Memory.Method || warm.Memory.PagesWritten > cold.Memory.PagesWritten+128 {
				t.Errorf("memory: cold %+v, pooled %+v (the pre-started process must not count)", cold.Memory, warm.Memory)
			}
			if len(cold.Files) != len(warm.Files) {
				t.Errorf("files: cold %+v, pooled %+v", cold.Files, warm.Files)
			}
			if len(cold.Violations) != len(warm.Violations) {
				t.Errorf("violations: cold %+v, pooled %+v", cold.Violations, warm.Violations)
			}
		})
	}
}
