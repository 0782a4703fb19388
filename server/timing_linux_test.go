package server_test

import (
	"context"
	"log/slog"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/dryexec/dryexec/server"
)

// doneRecords keeps the durations of every "trial done" record logged.
type doneRecords struct {
	mu   sync.Mutex
	seen []map[string]time.Duration
}

func (h *doneRecords) Enabled(context.Context, slog.Level) bool { return true }
func (h *doneRecords) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *doneRecords) WithGroup(string) slog.Handler            { return h }
func (h *doneRecords) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "trial done" {
		return nil
	}
	durs := map[string]time.Duration{}
	r.Attrs(func(a slog.Attr) bool {
		if a.Value.Kind() == slog.KindDuration {
			durs[a.Key] = a.Value.Duration()
		}
		return true
	})
	h.mu.Lock()
	h.seen = append(h.seen, durs)
	h.mu.Unlock()
	return nil
}

// TestTrialDoneLogsPhases: the daemon's "trial done" line says where the
// trial's time went (prep, run, record), each a real share of the call: none
// negative, none missing, together no more than the call took, the trial's
// own run the largest share of a command that sleeps.
func TestTrialDoneLogsPhases(t *testing.T) {
	requireNS(t)
	logged := &doneRecords{}
	svc, err := server.NewService(server.Config{StoreDir: filepath.Join(t.TempDir(), "home"), Log: slog.New(logged),
		Getenv: func(k string) string { return map[string]string{"PATH": "/usr/bin:/bin"}[k] }})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	began := time.Now()
	if _, err := svc.RunTrial(context.Background(), server.TrialRequest{Argv: []string{"sleep", "0.2"}, Cwd: t.TempDir()}, server.TrialHooks{}); err != nil {
		t.Fatal(err)
	}
	took := time.Since(began)
	logged.mu.Lock()
	defer logged.mu.Unlock()
	if len(logged.seen) != 1 {
		t.Fatalf("%d trial done records, want 1", len(logged.seen))
	}
	d := logged.seen[0]
	var sum time.Duration
	for _, k := range []string{"prep", "run", "record"} {
		v, ok := d[k]
		if !ok || v < 0 {
			t.Fatalf("trial done: %s = %v (present %v), want a duration ≥ 0: %v", k, v, ok, d)
		}
		sum += v
	}
	if sum > took {
		t.Fatalf("trial done: phases %v add up to %v, more than the call's %v", d, sum, took)
	}
	if d["run"] < 200*time.Millisecond || d["run"] < d["prep"] || d["run"] < d["record"] {
		t.Fatalf("trial done: run %v is not the share of a command that sleeps 0.2 s: %v", d["run"], d)
	}
}
