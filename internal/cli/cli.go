// Package cli owns the dryexec command line: parsing, wiring rungs and the trial
// store together, and mapping errors to exit codes. main only calls Run.
package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/localrun"
	"github.com/dryexec/dryexec/render"
	"github.com/dryexec/dryexec/server"
	"github.com/dryexec/dryexec/store"
)

// Exit codes (docs/decision.md; package localrun owns them, with the
// mapping of errors to them).
const (
	ExitRefused       = localrun.ExitRefused
	ExitUsage         = localrun.ExitUsage
	ExitReview        = localrun.ExitReview
	ExitBlock         = localrun.ExitBlock
	ExitCommandFailed = localrun.ExitCommandFailed
	ExitInternal      = localrun.ExitInternal
	ExitInterrupted   = localrun.ExitInterrupted
	ExitTerminated    = localrun.ExitTerminated
	ExitBrokenPipe    = localrun.ExitBrokenPipe
)

// Env is what a CLI invocation may touch of its process.
type Env = localrun.Env

// Run executes the CLI with args (without the program name) and returns the exit
// code.
func Run(ctx context.Context, args []string, env Env) int {
	env.Sweep = &localrun.Sweep{}
	defer env.Sweep.Wait()
	ctx, env.Interrupt = context.WithCancelCause(ctx)
	defer env.Interrupt(nil)
	code := 0
	note := localrun.NewNote("nothing was changed")
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
	root.AddCommand(runCmd(env, &code, note), showCmd(env), lsCmd(env), commitCmd(env, note), discardCmd(env), gcCmd(env), doctorCmd(env, &code), verifyCmd(env), policyCmd(env, &code))
	root.AddCommand(serveCmd(env), mcpCmd(env))
	root.AddCommand(agentCmd(env, &code))
	root.AddCommand(imagesCmd(env, &code))
	root.AddCommand(compareCmd(env), parkCmd(env), parkedCmd(env), resumeCmd(env))
	ran, err := root.ExecuteContextC(ctx)
	if ctx.Err() != nil && ran != nil && ran.Name() != "serve" && ran.Name() != "mcp" && ran.Name() != "agent" {
		// Ctrl-C or SIGTERM (main's signal.NotifyContext), or run's live
		// output with nowhere to go (env.Interrupt): say what became of
		// the trial, and exit as a shell reports a death by that signal.
		// (A daemon's SIGTERM is its ordinary stop: it drains and exits 0;
		// agent reports its own trials.)
		return localrun.Interrupted(ctx, env, note)
	}
	if err != nil {
		return localrun.Failed(env, err)
	}
	return code
}

// interruptNote says what an interrupt at this point did to the trial;
// commands update it as they go.
type interruptNote = localrun.Note

// usageError marks a mistake in how dryexec was called (exit 2), as
// localrun.UsageError does (localrun.Failed knows both by IsUsage).
type usageError struct{ error }

// IsUsage says the error is the caller's mistake.
func (usageError) IsUsage() bool { return true }

// usage wraps a cobra argument check so that its failures are usage errors.
func usage(check cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := check(cmd, args); err != nil {
			return usageError{err}
		}
		return nil
	}
}

// shownStatus is the "status" member `show --json` adds to the delta: the
// trial's state and how many changes are left to commit.
type shownStatus struct {
	store.State
	Left int `json:"left"`
}

// writeDeltaWithStatus writes d as printJSON does, with the trial's state as
// one more top-level member, "status" (last; not signed: verify leaves it
// out). The delta is streamed (WriteJSON) and only its closing brace held back.
func writeDeltaWithStatus(w io.Writer, d *dryexec.StateDelta, st shownStatus) error {
	b, err := json.MarshalIndent(st, "  ", "  ")
	if err != nil {
		return err
	}
	hw := &holdBack{w: w, n: 2} // "}\n"
	if err := d.WriteJSON(hw); err != nil {
		return err
	}
	if string(hw.held) != "}\n" {
		return fmt.Errorf("dryexec: the delta's JSON does not end as expected")
	}
	_, err = fmt.Fprintf(w, ",\n  \"status\": %s\n}\n", dryexec.UnescapeHTML(b))
	return err
}

// holdBack passes writes on to w but for the last n bytes.
type holdBack struct {
	w    io.Writer
	n    int
	held []byte
}

func (h *holdBack) Write(p []byte) (int, error) {
	h.held = append(h.held, p...)
	if k := len(h.held) - h.n; k > 0 {
		if _, err := h.w.Write(h.held[:k]); err != nil {
			return 0, err
		}
		h.held = append(h.held[:0], h.held[k:]...)
	}
	return len(p), nil
}

func printJSON(w io.Writer, v any) error {
	if d, ok := v.(*dryexec.StateDelta); ok {
		return d.WriteJSON(w) // the same bytes, one file at a time
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	// <, > and & as themselves (encoding/json escapes them for HTML, and
	// a FileChange's own encoder does whatever the caller asks).
	_, err = w.Write(append(dryexec.UnescapeHTML(b), '\n'))
	return err
}

func showCmd(env Env) *cobra.Command {
	var asJSON, network, files bool
	c := &cobra.Command{
		Use:   "show ID [--files | --network]",
		Short: "Print a stored trial",
		Args:  usage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := localrun.StartStore(env)
			if err != nil {
				return err
			}
			d, err := s.Load(args[0])
			if err != nil {
				return err
			}
			if network {
				recs, err := s.Exchanges(args[0])
				if err != nil {
					return err
				}
				if asJSON {
					if recs == nil {
						recs = []byte("[]")
					}
					_, err := fmt.Fprintf(env.Stdout, "%s\n", recs)
					return err
				}
				return render.Exchanges(env.Stdout, recs, render.Options{Color: localrun.Color(env.Stdout, env)})
			}
			if asJSON {
				st, err := s.StateOf(args[0])
				if err != nil {
					return err
				}
				left, err := store.Remaining(d, st)
				if err != nil {
					return err
				}
				return writeDeltaWithStatus(env.Stdout, d, shownStatus{State: st, Left: len(left)})
			}
			opt := render.Options{Color: localrun.Color(env.Stdout, env)}
			if files {
				opt.MaxFileLines = -1 // every change, with its diff
			}
			bw := bufio.NewWriterSize(env.Stdout, 64<<10)
			err = render.Summary(bw, d, opt)
			if ferr := bw.Flush(); err == nil {
				err = ferr
			}
			if err != nil {
				return err
			}
			st, err := s.StateOf(args[0])
			if err != nil {
				return err
			}
			left, err := store.Remaining(d, st)
			if err != nil {
				return err
			}
			if d.Receipt.Signature != "" {
				fmt.Fprintf(env.Stdout, "receipt: signed by %s, sha256 %s (dryexec verify %s)\n", d.Receipt.KeyID, d.Receipt.DeltaSHA256, d.TrialID)
			}
			fmt.Fprintf(env.Stdout, "status: %s\n", describeState(d.TrialID, st, left))
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the StateDelta as JSON")
	c.Flags().BoolVar(&network, "network", false, "print the network exchanges' headers and bodies (bounded, credentials redacted)")
	c.Flags().BoolVar(&files, "files", false, "list every change with its diff (by default a large trial's changes are grouped by directory)")
	return c
}

func lsCmd(env Env) *cobra.Command {
	return &cobra.Command{
		Use:   "ls",
		Short: "List stored trials, newest first",
		Args:  usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := localrun.StartStore(env)
			if err != nil {
				return err
			}
			defer localrun.AutoGC(s)
			list, err := s.List()
			if err != nil {
				return err
			}
			tw := tabwriter.NewWriter(env.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tAGE\tSTATUS\tDECISION\tEXIT\tFILES\tCOMMAND")
			for _, t := range list {
				d := t.Delta
				choice := d.Decision.Choice
				if choice == "" {
					choice = "-"
				}
				status := t.State.Status
				if status == store.StatusPartial {
					left, _ := store.Remaining(d, t.State)
					status = fmt.Sprintf("partly committed (%d left)", len(left))
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%d\t%s\n", t.ID, time.Since(t.Created).Round(time.Second),
					status, choice, d.Process.ExitCode, d.Totals.FilesChanged, render.CommandLine(d.Action.Argv))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			u, err := s.Usage()
			if err != nil {
				return err
			}
			_, err = fmt.Fprintf(env.Stdout, "store: %d trial%s, %s in %s (expired after %s; dryexec gc prunes now)\n",
				u.Trials, plural(u.Trials), humanSize(u.Bytes), s.Dir(), s.TTL())
			return err
		},
	}
}

func gcCmd(env Env) *cobra.Command {
	return &cobra.Command{
		Use:   "gc",
		Short: "Prune the trial store now: expired trials, and what crashes left",
		Long: `Prune the trial store now: trials older than the TTL (DRYEXEC_TRIAL_TTL, default 24h),
trials a killed run left half-recorded, and the content of committed or discarded trials that a
crash left behind (a commit or discard drops it at once). Every dryexec command does this by
itself at most every ten minutes, after its answer; gc is for now. gc also removes parked sessions
(dryexec park) past their expiry (DRYEXEC_PARK_TTL of the daemon that parked them, default
168h), damaged ones, and what a park or resume interrupted by a crash left, and names each,
and the temporary dirs of forks and uploads whose process is gone.`,
		Args: usage(cobra.NoArgs),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := localrun.StartStore(env)
			if err != nil {
				return err
			}
			r, err := s.GC()
			if err != nil {
				return err
			}
			u, err := s.Usage()
			if err != nil {
				return err
			}
			if _, err := fmt.Fprintf(env.Stdout, "gc: removed %d trial%s, dropped the content of %d finished trial%s, freed %s; the store holds %d trial%s, %s\n",
				r.Removed, plural(r.Removed), r.Dropped, plural(r.Dropped), humanSize(r.Freed), u.Trials, plural(u.Trials), humanSize(u.Bytes)); err != nil {
				return err
			}
			if n, err := dryexec.SweepPrivateTemp(os.Getenv); err != nil {
				return err
			} else if n > 0 {
				if _, err := fmt.Fprintf(env.Stdout, "gc: removed %d temporary dir%s that forks or uploads of processes now gone left\n", n, plural(n)); err != nil {
					return err
				}
			}
			parks, err := server.GCParks(s.Dir(), time.Now())
			for _, p := range parks {
				if _, werr := fmt.Fprintf(env.Stdout, "gc: removed parked session %s (%s): %s\n", p.SessionID, humanSize(p.Bytes), p.Reason); werr != nil {
					return werr
				}
			}
			return err
		},
	}
}

// humanSize is a size for people: 512 B, 1.5 KiB, 192.0 MiB.
func humanSize(n int64) string {
	if n < 1024 {
		return fmt.Sprintf("%d B", n)
	}
	v, units := float64(n), "KMGTPE"
	i := -1
	for v >= 1024 && i < len(units)-1 {
		v /= 1024
		i++
	}
	return fmt.Sprintf("%.1f %ciB", v, units[i])
}

func discardCmd(env Env) *cobra.Command {
	return &cobra.Command{
		Use:   "discard ID",
		Short: "Drop a stored trial without changing the host",
		Args:  usage(cobra.ExactArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := localrun.StartStore(env)
			if err != nil {
				return err
			}
			defer localrun.AutoGC(s)
			if err := s.Discard(args[0]); err != nil {
				return err
			}
			fmt.Fprintf(env.Stdout, "discarded %s\n", args[0])
			return nil
		},
	}
}

// describeState words a trial's state for show; left is what is still to
// commit of a partly committed trial (store.Remaining).
func describeState(id string, st store.State, left []dryexec.FileChange) string {
	var s string
	only := ""
	if len(st.Paths) > 0 {
		q := make([]string, len(st.Paths))
		for i, p := range st.Paths {
			q[i] = dryexec.QuotePath(p)
		}
		only = " (only " + strings.Join(q, ", ") + ")"
	}
	switch st.Status {
	case store.StatusCommitted:
		s = "committed " + st.At.Local().Format(time.DateTime) + only
	case store.StatusPartial:
		s = fmt.Sprintf("partly committed %s%s; %d change%s left (dryexec commit %s [PATH…] | dryexec discard %s):",
			st.At.Local().Format(time.DateTime), only, len(left), plural(len(left)), id, id)
		for i, f := range left {
			if i == 10 {
				s += fmt.Sprintf("\n  … %d more", len(left)-i)
				break
			}
			s += fmt.Sprintf("\n  %s %s", f.Op, dryexec.QuotePath(f.Path))
		}
	case store.StatusDiscarded:
		if only != "" {
			return "partly committed" + only + ", the rest discarded " + st.At.Local().Format(time.DateTime)
		}
		return "discarded " + st.At.Local().Format(time.DateTime)
	default:
		return "pending (dryexec commit ID | dryexec discard ID)"
	}
	if o := st.Override; o != nil {
		s += fmt.Sprintf("\noverride: decided %s, committed anyway by %s at %s", o.Decision, o.By, o.At.Local().Format(time.DateTime))
	}
	for _, u := range st.Skipped {
		s += fmt.Sprintf("\nskipped: %s: %s", dryexec.QuotePath(u.Path), u.Reason)
	}
	return s
}
