// Package runflags owns the flags of `dryexec run` that the local engine
// (cmd/dryexec-local) takes: their definitions, which the engine's `run`
// command (internal/cli) uses too, so that both read an invocation the same
// way, and Parse, which tells whether an invocation uses them alone.
package runflags

import (
	"io"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/dryexec/dryexec"
)

// The values of --exit-status. By default run exits with the decision
// (docs/decision.md): a command's own status could fake one. Tools that
// wrap commands (make, CI scripts, editors) want the command's status
// instead; --exit-status command gives it them, the decision still in the
// summary and the JSON. dryexec's own failures keep their codes (2 usage,
// 125 internal, 130/143 interrupted), and so does a refused --commit (1):
// those say the command's status is not what happened.
const (
	ExitDecision = "decision"
	ExitCommand  = "command"
)

// LocalName is the local engine's file name, beside the front and the
// engine (`make build`).
const LocalName = "dryexec-local"

// Local holds the values of the flags Define defines.
type Local struct {
	Via        string
	JSON       bool
	Quiet      bool
	NoStore    bool
	ExitStatus string
	Cwd        string
	Timeout    time.Duration
	// Env is --env's values (NAME=VALUE sets, NAME passes), PassEnv
	// --pass-env's.
	Env, PassEnv []string
}

// Define defines the flags on fs, bound to l.
func (l *Local) Define(fs *pflag.FlagSet) {
	fs.StringVar(&l.Via, "via", "", "where the trial runs: auto (the daemon of this install if one answers, else in this process), daemon or local (default $DRYEXEC_VIA, else auto; docs/api.md)")
	fs.BoolVar(&l.JSON, "json", false, "print the StateDelta as JSON")
	fs.DurationVar(&l.Timeout, "timeout", 0, "kill the command and everything it started after this long (0: none)")
	fs.StringArrayVar(&l.Env, "env", nil, "NAME=VALUE sets a variable in the command's environment, NAME (or NAME*) passes the caller's through (repeatable); by default only "+strings.Join(dryexec.EnvAllowlist, ", ")+" are")
	fs.StringArrayVar(&l.PassEnv, "pass-env", nil, "pass the caller's variable NAME (or NAME*) through (repeatable), like --env NAME")
	fs.BoolVarP(&l.Quiet, "quiet", "q", false, "do not show the command's output as it runs (the summary shows its tail after)")
	fs.BoolVar(&l.NoStore, "no-store", false, "do not keep the trial for a later commit")
	fs.StringVarP(&l.Cwd, "cwd", "C", "", "run in this directory (default: the current one; with --image, an absolute directory in the image, default its WorkingDir, else /)")
	fs.StringVar(&l.ExitStatus, "exit-status", ExitDecision, "what dryexec run exits with: decision (0 auto_commit, 3 review, 4 block, 5 the command failed) or command (the command's own status: 124 timed out, 128+N killed by signal N; the decision stays in the summary and --json)")
}

// Parse reads args (after the program name) as `run [FLAGS] -- CMD…` with
// FLAGS among Define's, read as the engine's cobra command reads them (both
// parse with pflag); ok is false for anything else — another command, any
// other flag, -h, a value pflag refuses, no `--`, words before it, or no
// command after it — which the engine then reads (and reports any mistake
// in). Values pflag takes but the engine checks later (--exit-status,
// --via, -C) are the caller's to check.
func Parse(args []string) (l Local, argv []string, ok bool) {
	if len(args) < 2 || args[0] != "run" {
		return l, nil, false
	}
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	l.Define(fs)
	if err := fs.Parse(args[1:]); err != nil || fs.ArgsLenAtDash() != 0 || fs.NArg() == 0 {
		return l, nil, false
	}
	return l, fs.Args(), true
}
