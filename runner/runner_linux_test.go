package runner_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/policy"
	"github.com/dryexec/dryexec/receipt"
	"github.com/dryexec/dryexec/rung"
	"github.com/dryexec/dryexec/runner"
	"github.com/dryexec/dryexec/store"
)

// failAfter is the real ns rung whose result is then refused, as a rung that
// fails after writing file contents to the store would (a protocol error
// found late): the runner must drop what was recorded. partial says whether
// the half-recorded trial was in the store when the rung returned.
type failAfter struct {
	dryexec.Rung
	trials  string
	partial bool
}

var errLate = errors.New("refused after the trial")

func (f *failAfter) Trial(ctx context.Context, spec dryexec.TrialSpec) (*dryexec.StateDelta, error) {
	if _, err := f.Rung.Trial(ctx, spec); err != nil {
		return nil, err
	}
	_, err := os.Stat(filepath.Join(f.trials, spec.TrialID+".partial"))
	f.partial = err == nil
	return nil, errLate
}

// TestRun: whatever the trial, the runner either returns a delta that is
// decided and signed (and stored, pending, unless NoStore) or an error with
// nothing of the trial left in the store.
func TestRun(t *testing.T) {
	ctx := context.Background()
	ns, err := rung.Select(ctx, "ns")
	testreq.Need(t, testreq.NS, err)
	engine, err := policy.Compile(policy.Default())
	if err != nil {
		t.Fatal(err)
	}
	sh := func(script string) []string { return []string{"/bin/sh", "-c", script} }
	for _, tc := range []struct {
		name    string
		argv    []string
		cwd     string // "": a fresh temp dir
		timeout int64
		opt     runner.Options
		cancel  bool // the context is cancelled before the trial
		late    bool // the rung fails after recording (failAfter)
		engine  *policy.Engine
		wantErr error // nil: a delta
		check   func(t *testing.T, d *dryexec.StateDelta, st *store.Store)
	}{
		{name: "writes a file", argv: sh("printf hello > f"), engine: engine,
			check: func(t *testing.T, d *dryexec.StateDelta, st *store.Store) {
				if len(d.Files) != 1 || d.Files[0].SHA256 == "" {
					t.Fatalf("files: %+v", d.Files)
				}
				if b, err := os.ReadFile(st.BlobPath(d.TrialID, d.Files[0].SHA256)); err != nil || string(b) != "hello" {
					t.Fatalf("the new content is not kept: %q %v", b, err)
				}
			}},
		{name: "failing command", argv: sh("exit 3"), engine: engine,
			check: func(t *testing.T, d *dryexec.StateDelta, _ *store.Store) {
				if d.Process.ExitCode != 3 || d.Decision.Choice == policy.AutoCommit {
					t.Fatalf("exit %d decided %s", d.Process.ExitCode, d.Decision.Choice)
				}
			}},
		{name: "timed out", argv: sh("echo x > f; exec sleep 30"), timeout: 200, engine: engine,
			check: func(t *testing.T, d *dryexec.StateDelta, _ *store.Store) {
				if !d.Process.TimedOut || len(d.Files) != 1 {
					t.Fatalf("timed out %v, files %+v", d.Process.TimedOut, d.Files)
				}
			}},
		{name: "not stored", argv: sh("printf hello > f"), opt: runner.Options{NoStore: true}, engine: engine,
			check: func(t *testing.T, d *dryexec.StateDelta, _ *store.Store) {
				if len(d.Files) != 1 {
					t.Fatalf("files: %+v", d.Files)
				}
			}},
		{name: "content past the cap is listed, not kept", argv: sh("head -c 4096 /dev/zero | tr '\\0' x > f"), opt: runner.Options{ContentCap: 1}, engine: engine,
			check: func(t *testing.T, d *dryexec.StateDelta, _ *store.Store) {
				if len(d.Files) != 1 || d.Files[0].Kept() {
					t.Fatalf("files: %+v", d.Files)
				}
			}},
		{name: "bad action", argv: sh("true"), cwd: "/nonexistent-dryexec-runner", engine: engine, wantErr: dryexec.ErrBadAction},
		{name: "cancelled", argv: sh("echo x > f"), cancel: true, engine: engine, wantErr: context.Canceled},
		{name: "rung fails after recording", argv: sh("printf hello > f"), late: true, engine: engine, wantErr: errLate},
		{name: "no decision engine", argv: sh("echo x > f"), wantErr: runner.ErrMissing},
	} {
		t.Run(tc.name, func(t *testing.T) {
			home := t.TempDir()
			r := newRunner(t, home)
			st := r.Store()
			signer, err := receipt.LoadOrCreate(home)
			if err != nil {
				t.Fatal(err)
			}
			cwd := tc.cwd
			if cwd == "" {
				cwd = t.TempDir()
			}
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			if tc.cancel {
				cancel()
			}
			var rg dryexec.Rung = ns
			late := &failAfter{Rung: ns, trials: filepath.Join(home, "trials")}
			if tc.late {
				rg = late
			}
			var started string
			ran := false
			opt := tc.opt
			opt.Started = func(id string) { started = id }
			opt.Ran = func() { ran = true }
			spec := dryexec.TrialSpec{Action: dryexec.Action{Argv: tc.argv, Cwd: cwd, Env: map[string]string{"PATH": "/usr/bin:/bin"}, TimeoutMS: tc.timeout}}
			d, err := r.Run(ctx, rg, tc.engine, spec, opt)
			if tc.wantErr != nil {
				if d != nil || !errors.Is(err, tc.wantErr) {
					t.Fatalf("Run = %v, %v; want %v", d, err, tc.wantErr)
				}
				if tc.late && !late.partial {
					t.Fatal("the rung recorded nothing before it failed: the case proves nothing")
				}
				if tc.engine == nil && (started != "" || ran) {
					t.Fatal("a trial without a decision engine was started")
				}
				if left := entries(t, st); len(left) != 0 {
					t.Fatalf("a failed trial left %q in the store", left)
				}
				if _, err := os.Stat(filepath.Join(cwd, "f")); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("the host changed: %v", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if started != d.TrialID || !ran {
				t.Fatalf("hooks: started %q (trial %s), ran %v", started, d.TrialID, ran)
			}
			switch d.Decision.Choice {
			case policy.AutoCommit, policy.Review, policy.Block:
			default:
				t.Fatalf("no decision: %+v", d.Decision)
			}
			doc, err := json.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := receipt.Verify(doc, signer.PublicKey()); err != nil {
				t.Fatalf("the receipt does not verify: %v", err)
			}
			left := entries(t, st)
			if tc.opt.NoStore {
				if len(left) != 0 {
					t.Fatalf("a trial run with NoStore left %q in the store", left)
				}
			} else {
				if strings.Join(left, " ") != d.TrialID {
					t.Fatalf("store holds %q, want only %s", left, d.TrialID)
				}
				if s, err := st.StateOf(d.TrialID); err != nil || s.Status != store.StatusPending {
					t.Fatalf("state %+v %v", s, err)
				}
				raw, err := os.ReadFile(filepath.Join(home, "trials", d.TrialID, "delta.json"))
				if err != nil {
					t.Fatal(err)
				}
				if rc, err := receipt.Verify(raw, signer.PublicKey()); err != nil || rc != d.Receipt {
					t.Fatalf("the stored delta's receipt: %+v %v (returned %+v)", rc, err, d.Receipt)
				}
			}
			if _, err := os.Stat(filepath.Join(cwd, "f")); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("the host changed: %v", err)
			}
			if tc.check != nil {
				tc.check(t, d, st)
			}
		})
	}
}

// entries lists what the store's trials dir holds.
func entries(t *testing.T, st *store.Store) []string {
	t.Helper()
	ents, err := os.ReadDir(filepath.Join(st.Dir(), "trials"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range ents {
		out = append(out, e.Name())
	}
	return out
}
