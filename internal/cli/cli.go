// Package cli owns the dryexec command line: parsing, wiring rungs and the trial
// store together, and mapping errors to exit codes. main only calls Run.
package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/dryexec/dryexec/render"
	"github.com/dryexec/dryexec/store"
)

// Exit codes of dryexec itself. `run` otherwise exits with the command's own code.
const (
	ExitUsage    = 2   // bad flags or arguments
	ExitInternal = 125 // dryexec failed (not the command): like docker and podman
	ExitNotFound = 127 // `run`: the command does not exist in the sandbox
)

// Env is what a CLI invocation may touch of its process.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Getenv         func(string) string
}

// Run executes the CLI with args (without the program name) and returns the exit
// code.
func Run(ctx context.Context, args []string, env Env) int {
	code := 0
	root := &cobra.Command{
		Use:           "dryexec",
		Short:         "Run a command in an ephemeral trial and see what it would change",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageError{err} })
	root.SetArgs(args)
	root.SetIn(env.Stdin)
	root.SetOut(env.Stdout)
	root.SetErr(env.Stderr)
	root.AddCommand(runCmd(env, &code), showCmd(env), lsCmd(env), discardCmd(env), doctorCmd(env, &code))
	if err := root.ExecuteContext(ctx); err != nil {
		fmt.Fprintln(env.Stderr, "dryexec:", err)
		var ue usageError
		if errors.As(err, &ue) || strings.HasPrefix(err.Error(), "unknown command") {
			return ExitUsage
		}
		return ExitInternal
	}
	return code
}

// usageError marks a mistake in how dryexec was called (exit 2).
type usageError struct{ error }

// usage wraps a cobra argument check so that its failures are usage errors.
func usage(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

func openStore(env Env) (*store.Store, error) {
	dir, err := store.DefaultDir(env.Getenv)
	if err != nil {
		return nil, err
	}
	return store.Open(dir)
}

func isTerminal(w io.Writer, env Env) bool {
	f, ok := w.(*os.File)
	return ok && render.ColorWanted(f, env.Getenv)
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

func showCmd(env Env) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "show ID",
		Short: "Print a stored trial",
		Args:  usage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := openStore(env)
			if err != nil {
				return err
			}
			d, err := s.Load(args[0])
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(env.Stdout, d)
			}
			return render.Summary(env.Stdout, d, render.Options{Color: isTerminal(env.Stdout, env)})
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the StateDelta as JSON")
	return c
}

func lsCmd(env Env) *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List stored trials, newest first",
		Args:  usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := openStore(env)
			if err != nil {
				return err
			}
			list, err := s.List()
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tAGE\tEXIT\tFILES\tCOMMAND")
			for _, t := range list {
				d := t.Delta
				fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\n", t.ID, time.Since(t.Created).Round(time.Second),
					d.Process.ExitCode, d.Totals.FilesChanged, render.CommandLine(d.Action.Argv))
			}
			return tw.Flush()
		},
	}
}

func discardCmd(env Env) *cobra.Command {
	return &cobra.Command{
		Use:   "discard ID",
		Short: "Drop a stored trial without changing the host",
		Args:  usage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := openStore(env)
			if err != nil {
				return err
			}
			if err := s.Discard(args[0]); err != nil {
				return err
			}
			fmt.Fprintf(env.Stdout, "discarded %s\n", args[0])
			return nil
		},
	}
}
