package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"strings"
	"unicode/utf8"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/apiclient"
	"github.com/dryexec/dryexec/internal/localrun"
	"github.com/dryexec/dryexec/policy"
	"github.com/dryexec/dryexec/render"
	"github.com/dryexec/dryexec/server"
)

// maxDaemonStdin is what `run --via daemon --stdin` reads of its standard
// input to send: the API takes stdin whole, in the request (its limit).
const maxDaemonStdin = 64 << 20

// daemonRequest is the API request for the trial spec describes, as `run`
// built it: the environment exactly as built from the caller's (env_exact),
// "~/" masks made absolute with this process's home (as the rung would),
// pol when --policy named one (else the daemon's policy decides, as it does
// for every client). Defaults are sent as zero, so that a plain trial takes
// the daemon's warm pool (a sandbox of another shape runs cold).
func daemonRequest(spec dryexec.TrialSpec, rungName string, pol *policy.Policy, noStore bool, contentCap int64) (server.TrialRequest, error) {
	a := spec.Action
	req := server.TrialRequest{Argv: a.Argv, Cwd: a.Cwd, Env: a.Env, EnvExact: true, TimeoutMS: a.TimeoutMS,
		Rung: rungName, NoStore: noStore, ContentCap: contentCap, Net: spec.Net, NoDefaultMasks: spec.NoDefaultMasks}
	if spec.OutputCap != dryexec.DefaultOutputCap {
		req.OutputCap = spec.OutputCap
	}
	if spec.UpperSizeBytes != dryexec.DefaultUpperSizeBytes {
		req.UpperSizeBytes = spec.UpperSizeBytes
	}
	if l := spec.Limits; l != (dryexec.Limits{}) {
		req.Limits = &server.LimitsRequest{MemoryBytes: l.MemoryBytes, Pids: l.Pids, CPUs: l.CPUs, CPUWeight: l.CPUWeight}
	}
	for _, m := range spec.Masks {
		if rest, ok := strings.CutPrefix(m, "~/"); ok {
			h := homeDir()
			if h == "" {
				return req, usageError{fmt.Errorf("--mask %s: no home directory known", m)}
			}
			m = h + "/" + rest
		}
		req.Masks = append(req.Masks, m)
	}
	if pol != nil {
		b, err := json.Marshal(pol)
		if err != nil {
			return req, err
		}
		req.Policy = b
	}
	if spec.Stdin != nil {
		b, err := io.ReadAll(io.LimitReader(spec.Stdin, maxDaemonStdin+1))
		if err != nil {
			return req, err
		}
		if len(b) > maxDaemonStdin {
			return req, usageError{fmt.Errorf("--stdin: more than %d MiB, which the daemon does not take; use --via local", maxDaemonStdin>>20)}
		}
		if !utf8.Valid(b) {
			// As notText: JSON would carry other bytes than were read.
			return req, usageError{errors.New("--stdin: the input is not valid UTF-8, which the daemon's API cannot carry unchanged; use --via local")}
		}
		s := string(b)
		req.Stdin = &s
	}
	return req, nil
}

// notText names the first part of spec's request that is not valid UTF-8
// (an argument, the directory, a variable, a mask, stdin), or "".
func notText(spec dryexec.TrialSpec) string {
	a := spec.Action
	for i, arg := range a.Argv {
		if !utf8.ValidString(arg) {
			return fmt.Sprintf("argument %d of the command", i)
		}
	}
	if !utf8.ValidString(a.Cwd) {
		return "the working directory"
	}
	for k, v := range a.Env {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return "an environment variable"
		}
	}
	for _, m := range spec.Masks {
		if !utf8.ValidString(m) {
			return "a --mask path"
		}
	}
	return ""
}

// homeDir is the home "~/" stands for, as the ns rung reads it: $HOME, else
// the user's.
func homeDir() string {
	if h := os.Getenv("HOME"); h != "" {
		return h
	}
	if u, err := user.Current(); err == nil {
		return u.HomeDir
	}
	return ""
}

// daemonRun is `run` handing its trial to the daemon: what it needs besides
// the spec.
type daemonRun struct {
	env        Env
	home, via  string
	rungName   string
	pol        *policy.Policy // --policy's, nil without one
	noStore    bool
	contentCap int64 // --content-cap's, 0 without one
	live       []*render.LiveWriter
	note       *interruptNote
	quiet      bool
	image      string // --image's reference, "" without one
}

// run runs spec through the daemon and returns its delta; with --via auto,
// nil and no error when the trial is better run in this process: no daemon
// of this install answers, the daemon is busy, or the trial needs what only
// this process gives (a live stdin, a policy with an external scorer). With
// --via daemon those are errors (apiclient.ErrNoDaemon, a usage error, server.ErrBusy).
func (r daemonRun) run(ctx context.Context, spec dryexec.TrialSpec) (*dryexec.StateDelta, error) {
	auto := r.via == localrun.ViaAuto
	switch {
	case spec.Stdin != nil && auto:
		// The API takes stdin whole, in the request: an interactive or
		// endless stdin would never be sent. Here it is passed through live.
		return nil, nil
	case r.pol != nil && r.pol.Scorer != nil:
		// The daemon refuses a request's scorer (it would run on the host,
		// outside any sandbox); here it is the caller's own.
		if auto {
			return nil, nil
		}
		return nil, usageError{errors.New("--policy names an external scorer, which a daemon does not take from a request (set it with serve --policy); use --via local")}
	}
	if what := notText(spec); what != "" {
		// The API is JSON, which carries text: encoding/json would replace
		// each byte that is not UTF-8 with U+FFFD, and the daemon would
		// run another command, in another directory, or with other input.
		if auto {
			return nil, nil
		}
		return nil, usageError{fmt.Errorf("%s is not valid UTF-8, which the daemon's API cannot carry unchanged; use --via local", what)}
	}
	dc, err := findDaemon(ctx, r.env, r.home)
	if err != nil {
		if auto {
			return nil, nil
		}
		return nil, err
	}
	cc := r.contentCap
	if cc == 0 {
		// DRYEXEC_TRIAL_CONTENT_CAP is this process's setting for its own
		// trials: it travels with the trial (the daemon's applies otherwise).
		if cc, err = localrun.ParseBytes(r.env.Getenv("DRYEXEC_TRIAL_CONTENT_CAP")); err != nil {
			return nil, usageError{fmt.Errorf("DRYEXEC_TRIAL_CONTENT_CAP: %w", err)}
		}
	}
	req, err := daemonRequest(spec, r.rungName, r.pol, r.noStore, cc)
	if err != nil {
		return nil, err
	}
	req.Image = r.image
	d, err := dc.RunTrial(ctx, req, apiclient.Hooks{
		Queued: func() {
			if !r.quiet {
				fmt.Fprintf(r.env.Stderr, "dryexec: the daemon (%s) runs as many trials as it may; this one waits for a slot\n", dc.Where)
			}
		},
		Started: func(id string) {
			r.note.Set("trial %s was stopped before it finished; nothing of it was kept (a trial never changes the host)", id)
		},
		Stdout: spec.Stdout, Stderr: spec.Stderr,
	})
	for _, l := range r.live {
		l.Flush()
	}
	var bs apiclient.BeforeStart
	var de *apiclient.Error
	if err != nil && auto && errors.As(err, &bs) && ctx.Err() == nil && (errors.Is(err, server.ErrBusy) || !errors.As(err, &de)) {
		// Nothing ran (the daemon is busy, or went away before it
		// started the trial): run it here instead. Anything else the
		// daemon refused would be refused here too, so it is reported.
		if !r.quiet {
			fmt.Fprintf(r.env.Stderr, "dryexec: the daemon did not take the trial (%v); running it in this process\n", bs.Err)
		}
		return nil, nil
	}
	return d, err
}
