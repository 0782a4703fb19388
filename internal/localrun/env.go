// Package localrun owns `dryexec run`'s trial in the caller's own process
// (no daemon): the store's start-up and recovery, the policy, the receipt
// key, the runner, the summary, the exit code and what an interrupt says.
// The whole CLI (internal/cli, the engine) and the local engine
// (cmd/dryexec-local) both run it; the local engine takes only the
// invocations of run (internal/runflags) that need nothing else, on the ns
// rung, and links none of the rest: no cobra commands, daemon, MCP, images
// or other rungs. docs/architecture.md, "The front and the engine".
package localrun

import (
	"context"
	"io"
	"sync"

	"github.com/dryexec/dryexec/runner"
)

// Env is what a CLI invocation may touch of its process.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string

	// Sweep is the invocation's sweep of dead sandboxes' cgroups; nil
	// sweeps in place (Sweep.Start).
	Sweep *Sweep

	// Interrupt, when set, ends the invocation's context as a signal
	// would, with the signal's cause (front.Interrupt): a run whose live
	// output finds its reader gone (`dryexec run -- cmd | head`) ends
	// as if killed by SIGPIPE, but with its trial stopped and torn down
	// first (Live, CatchBrokenPipe).
	Interrupt context.CancelCauseFunc
}

// Sweep runs runner.RecoverSandboxes once, beside the command instead of
// before it: the sweep walks every cgroup hierarchy of the host (a few ms
// here, more on a host with many groups) and the command needs nothing of
// it. The invocation waits for it before it returns, so every command that
// uses the store still cleans what a killed dryexec left.
type Sweep struct {
	once sync.Once
	done chan struct{}
}

// Start starts the sweep, once; without a Sweep (an Env made outside an
// invocation) it sweeps before returning.
func (s *Sweep) Start() {
	if s == nil {
		runner.RecoverSandboxes()
		return
	}
	s.once.Do(func() {
		s.done = make(chan struct{})
		go func() {
			defer close(s.done)
			runner.RecoverSandboxes()
		}()
	})
}

// Wait returns once a started sweep has finished; a sweep not started by
// then never starts.
func (s *Sweep) Wait() {
	s.once.Do(func() {})
	if s.done != nil {
		<-s.done
	}
}
