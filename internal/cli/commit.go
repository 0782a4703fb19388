package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/localrun"
	"github.com/dryexec/dryexec/server"
	"github.com/dryexec/dryexec/store"
)

func commitCmd(env Env, note *interruptNote) *cobra.Command {
	var force, allowBlocked, skip bool
	var forcePaths []string
	var to string
	c := &cobra.Command{
		Use:   "commit ID [PATH...]",
		Short: "Apply a stored trial's changes to the host (all, or only PATHs and what is under them)",
		Long: `Apply a stored trial's changes to the host (all, or only PATHs and what is under them).
The stored trial must verify against this install's receipt key, and every content
is checked against it, before anything on the host changes. A trial decided block is
refused unless --force (or --allow-blocked, which overrides only that) says a person
decided otherwise (recorded with the trial: dryexec show). Sockets, device nodes and contents that were not kept cannot be
committed: the commit is refused, naming them, unless --skip-uncommittable.
A trial that ran on an image (run --image) commits only with --to DIR: what it
changed beneath its workspace (its cwd in the image) is applied beneath the host
directory DIR; nothing else of it is ever committable (docs/images.md).`,
		Args: usage(cobra.MinimumNArgs(1)),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := localrun.StartStore(env)
			if err != nil {
				return err
			}
			defer localrun.AutoGC(s)
			paths, err := absPaths(args[1:])
			if err != nil {
				return err
			}
			fps, err := absPaths(forcePaths)
			if err != nil {
				return err
			}
			d, err := s.Load(args[0])
			if err != nil {
				return err
			}
			if to != "" {
				if to, err = filepath.Abs(to); err != nil {
					return usageError{err}
				}
			}
			// A trial on an image names paths beneath --to.
			if d, _, err = store.MapImage(d, to); err != nil {
				return err
			}
			if err := server.CheckCommitPaths(d, paths); err != nil {
				return usageError{err}
			}
			// --force is a person's decision: over the policy's block as over
			// the host's changes. --allow-blocked overrides only the block.
			err = doCommit(cmd.Context(), env, note, s, args[0], store.CommitOptions{Paths: paths, Force: force, ForcePaths: fps,
				AllowBlocked: allowBlocked || force, SkipUncommittable: skip, To: to})
			if errors.Is(err, dryexec.ErrBlocked) {
				return fmt.Errorf("%w\nif a person decided to commit it anyway: dryexec commit --force %s (recorded with the trial)", err, args[0])
			}
			return err
		},
	}
	c.Flags().BoolVar(&force, "force", false, "commit even a trial decided block, and where the host changed since the trial (never through a symlink); the override is recorded")
	c.Flags().StringArrayVar(&forcePaths, "force-path", nil, "like --force, only at and under this path (repeatable)")
	c.Flags().BoolVar(&allowBlocked, "allow-blocked", false, "commit a trial the policy decided block (the override is recorded with the trial)")
	c.Flags().StringVar(&to, "to", "", "for a trial that ran on an image: the host directory that receives what it changed beneath its workspace (required for such a trial, refused for others)")
	c.Flags().BoolVar(&skip, "skip-uncommittable", false, "commit the rest when some paths cannot be committed (sockets, device nodes, contents not kept); they are listed")
	return c
}

func doCommit(ctx context.Context, env Env, note *interruptNote, s *store.Store, id string, opt store.CommitOptions) error {
	opt.Hook = crashHook(env)
	note.Set("the commit of %s was stopped: it is all or nothing, so either it completed or the host is as it was (dryexec show %s says which)", id, id)
	r, err := s.CommitWith(ctx, id, opt)
	if err != nil {
		return err
	}
	note.Set("%s was committed", id)
	if o := r.Override; o != nil {
		fmt.Fprintf(env.Stderr, "dryexec: %s was decided %s; committed because you asked (recorded: dryexec show %s)\n", id, o.Decision, id)
	}
	if r.Outside > 0 {
		fmt.Fprintf(env.Stderr, "dryexec: %d change%s of %s outside its workspace in the image left out (never committable)\n", r.Outside, plural(r.Outside), id)
	}
	for _, u := range r.Skipped {
		fmt.Fprintf(env.Stderr, "dryexec: skipped %s: %s\n", dryexec.QuotePath(u.Path), u.Reason)
	}
	left := ""
	if st, err := s.StateOf(id); err == nil && st.Status == store.StatusPartial {
		if d, err := s.Load(id); err == nil {
			if rest, err := store.Remaining(d, st); err == nil {
				left = fmt.Sprintf("; %d left to commit or discard (dryexec show %s)", len(rest), id)
			}
		}
	}
	fmt.Fprintf(env.Stdout, "committed %s: %d change%s applied%s\n", id, len(r.Applied), plural(len(r.Applied)), left)
	return nil
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// absPaths resolves command-line paths against the working directory.
func absPaths(ps []string) ([]string, error) {
	out := make([]string, len(ps))
	for i, p := range ps {
		a, err := filepath.Abs(p)
		if err != nil {
			return nil, err
		}
		out[i] = a
	}
	return out, nil
}

// askCommit is `run -i`: it shows nothing itself (the summary was printed) and
// asks whether to commit all, nothing, or a choice of paths.
func askCommit(env Env, d *dryexec.StateDelta) (all bool, paths []string, err error) {
	in := bufio.NewReader(env.Stdin)
	// ask asks q until the answer is one of valid ("" is valid when a
	// default is offered): an answer it does not know is asked again,
	// never taken for a no.
	ask := func(q string, valid ...string) (string, error) {
		for {
			fmt.Fprint(env.Stdout, q)
			line, err := in.ReadString('\n')
			if err != nil && line == "" {
				fmt.Fprintln(env.Stdout)
				return "", fmt.Errorf("no answer on standard input: %w", err)
			}
			a := strings.ToLower(strings.TrimSpace(line))
			if slices.Contains(valid, a) {
				return a, nil
			}
			fmt.Fprintf(env.Stdout, "%q is not an answer here: type one of %s\n", strings.TrimSpace(line), strings.Join(slices.DeleteFunc(slices.Clone(valid), func(s string) bool { return s == "" }), ", "))
			if err != nil {
				return "", fmt.Errorf("no answer on standard input: %w", err)
			}
		}
	}
	n := d.NumFiles()
	if n == 0 {
		return false, nil, nil
	}
	a, err := ask(fmt.Sprintf("Commit %d change%s to the host? [y]es, [n]o, [s]elect: ", n, plural(n)), "y", "yes", "n", "no", "s", "select")
	if err != nil {
		return false, nil, err
	}
	switch a {
	case "y", "yes":
		return true, nil, nil
	case "s", "select":
	default:
		return false, nil, nil
	}
	// One question per top-most changed path: a directory answers for all
	// beneath it, as `dryexec commit ID DIR` would.
	var asked []string
	err = d.EachFile(func(f *dryexec.FileChange) error {
		covered := false
		for _, p := range asked {
			covered = covered || strings.HasPrefix(f.Path, p+"/")
		}
		if covered {
			return nil
		}
		a, err := ask(fmt.Sprintf("  %s %s? [y/N] ", f.Op, dryexec.QuotePath(f.Path)), "y", "yes", "n", "no", "")
		if err != nil {
			return err
		}
		if f.Kind == dryexec.KindDir {
			asked = append(asked, f.Path)
		}
		if a == "y" || a == "yes" {
			paths = append(paths, f.Path)
		}
		return nil
	})
	if err != nil {
		return false, nil, err
	}
	return false, paths, nil
}
