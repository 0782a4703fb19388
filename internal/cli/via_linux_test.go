package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dryexec/dryexec/policy"
	"github.com/dryexec/dryexec/server"
)

// syncBuffer is a daemon's log, read while the daemon writes it.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// testDaemon is a real daemon (server.Serve) of the store home, listening on
// the default socket of XDG_RUNTIME_DIR=runtime, with a warm pool of one.
type testDaemon struct {
	runtime, sock string
	log           *syncBuffer
}

func startTestDaemon(t *testing.T, home string) *testDaemon {
	t.Helper()
	d := &testDaemon{runtime: t.TempDir(), log: &syncBuffer{}}
	d.sock = filepath.Join(d.runtime, "dryexec.sock")
	svc, err := server.NewService(server.Config{StoreDir: home, Pool: 1, PoolIdle: time.Hour,
		Getenv: func(k string) string { return map[string]string{"PATH": "/usr/bin:/bin", "LANG": "daemon-only"}[k] },
		Log:    slog.New(slog.NewTextHandler(d.log, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := svc.Recover(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() {
		done <- server.Serve(ctx, svc, server.ServeOptions{Socket: d.sock, Drain: 5 * time.Second, Ready: func(string) { close(ready) }})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("serve: %v", err)
	}
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	})
	return d
}

// ran reports whether the daemon ran the trial id (its log records each).
func (d *testDaemon) ran(id string) bool {
	return strings.Contains(d.log.String(), `msg="trial done" trial=`+id)
}

// health is the daemon's /v1/health.
func (d *testDaemon) health(t *testing.T, home string) (h struct {
	Running int `json:"trials_running"`
	Pool    struct {
		Hits, Ready, Busy int
	} `json:"pool"`
}) {
	t.Helper()
	dc, err := findDaemon(context.Background(), Env{Getenv: func(k string) string {
		return map[string]string{"XDG_RUNTIME_DIR": d.runtime}[k]
	}}, home)
	if err != nil {
		t.Fatal(err)
	}
	if err := dc.Call(context.Background(), "GET", "/v1/health", nil, &h); err != nil {
		t.Fatal(err)
	}
	return h
}

// poolHits is the daemon's warm pool's hit count.
func (d *testDaemon) poolHits(t *testing.T, home string) int { return d.health(t, home).Pool.Hits }

// poolQuiet waits until the daemon's warm pool has a sandbox ready and no
// background work (a teardown, a refill) in flight, as the benchmark does:
// a trial started then takes a pooled sandbox if its shape fits.
func (d *testDaemon) poolQuiet(t *testing.T, home string) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for h := d.health(t, home); h.Pool.Ready == 0 || h.Pool.Busy > 0; h = d.health(t, home) {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon's pool not ready and quiet after 30 s: %+v", h.Pool)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// running is how many trials the daemon runs.
func (d *testDaemon) running(t *testing.T, home string) int { return d.health(t, home).Running }

// shape is a JSON document with its variable values (ids, times, sizes of
// memory, signatures) replaced by their JSON type, so that two deltas of the
// same command compare equal whichever process ran them.
func shape(t *testing.T, doc string) any {
	t.Helper()
	var v any
	if err := json.Unmarshal([]byte(doc), &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, doc)
	}
	variable := map[string]bool{"trial_id": true, "started_at": true, "finished_at": true, "duration_ns": true, "memory": true,
		"receipt": true, "created": true, "pid": true, "mtime": true, "phases": true, "duration_nanos": true, "peak_rss_bytes": true}
	var walk func(any) any
	walk = func(v any) any {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if variable[k] || strings.HasSuffix(k, "_ns") || strings.HasSuffix(k, "_at") {
					x[k] = fmt.Sprintf("%T", e)
				} else {
					x[k] = walk(e)
				}
			}
		case []any:
			for i, e := range x {
				x[i] = walk(e)
			}
		}
		return v
	}
	return walk(v)
}

var (
	trialIDs = regexp.MustCompile(`tr_[a-z0-9]{20}`)
	numbers  = regexp.MustCompile(`[0-9]+(\.[0-9]+)?`)
	// durations: a trial's time, whose unit changes with it (945.7µs,
	// 8.3ms): a fast machine runs some under a millisecond.
	durations = regexp.MustCompile(`[0-9]+(\.[0-9]+)?(ns|µs|ms|s)\b`)
)

// summaryShape is a human summary without its trial id and figures.
func summaryShape(s string) string {
	return numbers.ReplaceAllString(durations.ReplaceAllString(trialIDs.ReplaceAllString(s, "ID"), "D"), "N")
}

// TestRunThroughDaemon: with a daemon of this install on the default socket,
// `dryexec run` hands it the trial (the daemon's log records it, and its
// warm pool was used), and prints the same delta, summary and exit code as
// the same command run in-process (--via local, DRYEXEC_VIA=local, which the
// daemon never sees). The trial's environment is the CLI caller's, not the
// daemon's (env_exact). A live --stdin stays in-process under auto.
func TestRunThroughDaemon(t *testing.T) {
	requireNS(t)
	home, dir := t.TempDir(), t.TempDir()
	d := startTestDaemon(t, home)
	block := writeFile(t, t.TempDir(), "block.yaml", "rules:\n  - {name: no-x, expr: \"delta.files.exists(f, f.path.endsWith('/x.txt'))\", result: block, reason: no x}\n")
	tests := []struct {
		name       string
		vars       map[string]string
		via        string // --via, if any
		args       []string
		wantDaemon bool
		pooled     bool // a sandbox of the daemon's default shape
		wantCode   int
	}{
		{"auto, a file written", nil, "", []string{"--", "sh", "-c", "echo hi > x.txt"}, true, true, 0},
		{"--via daemon", nil, "daemon", []string{"--", "sh", "-c", "echo hi > x.txt"}, true, true, 0},
		{"a failing command", nil, "", []string{"--", "sh", "-c", "echo oops >&2; exit 7"}, true, true, ExitCommandFailed},
		{"--exit-status command", nil, "", []string{"--exit-status", "command", "--", "sh", "-c", "exit 7"}, true, true, 7},
		{"--policy file: block", nil, "", []string{"--policy", block, "--", "sh", "-c", "echo hi > x.txt"}, true, true, ExitBlock},
		{"--no-store, limits", nil, "", []string{"--no-store", "--pids", "64", "--", "sh", "-c", "echo hi > x.txt"}, true, false, 0},
		{"--via local", nil, "local", []string{"--", "sh", "-c", "echo hi > x.txt"}, false, false, 0},
		{"DRYEXEC_VIA=local", map[string]string{"DRYEXEC_VIA": "local"}, "", []string{"--", "true"}, false, false, 0},
		{"--stdin stays in-process", nil, "", []string{"--stdin", "--", "cat"}, false, false, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vars := map[string]string{"XDG_RUNTIME_DIR": d.runtime, "LANG": "C.UTF-8"}
			for k, v := range tt.vars {
				vars[k] = v
			}
			run := func(via string, asJSON bool) (int, string, string) {
				args := []string{"run", "-C", dir}
				if via != "" {
					args = append(args, "--via", via)
				}
				if asJSON {
					args = append(args, "--json")
				}
				return cliWith(t, home, vars, append(args, tt.args...)...)
			}
			d.poolQuiet(t, home)
			hits := d.poolHits(t, home)
			code, out, errs := run(tt.via, true)
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d: %s", code, tt.wantCode, errs)
			}
			got := decode(t, out)
			if d.ran(got.TrialID) != tt.wantDaemon {
				t.Fatalf("the daemon ran %s: %v, want %v\n%s", got.TrialID, d.ran(got.TrialID), tt.wantDaemon, d.log.String())
			}
			if got.Action.Env["LANG"] != "C.UTF-8" {
				t.Errorf("LANG in the trial: %q, want the caller's C.UTF-8", got.Action.Env["LANG"])
			}
			if !tt.wantDaemon {
				return
			}
			if tt.pooled && d.poolHits(t, home) <= hits {
				t.Errorf("the daemon's warm pool was not used (hits %d before and after)", hits)
			}
			// The same trial in-process: the same exit, the same delta
			// but for what differs between any two runs.
			lcode, lout, lerrs := run("local", true)
			if lcode != code {
				t.Errorf("in-process exit %d, through the daemon %d (%s)", lcode, code, lerrs)
			}
			if d.ran(decode(t, lout).TrialID) {
				t.Error("--via local ran through the daemon")
			}
			if a, b := shape(t, out), shape(t, lout); !reflect.DeepEqual(a, b) {
				ja, _ := json.MarshalIndent(a, "", " ")
				jb, _ := json.MarshalIndent(b, "", " ")
				t.Errorf("the deltas differ in shape:\nthrough the daemon: %s\nin-process: %s", ja, jb)
			}
			// And the human summary, live output included.
			_, hout, herrs := run(tt.via, false)
			_, lhout, lherrs := run("local", false)
			if summaryShape(hout) != summaryShape(lhout) || summaryShape(herrs) != summaryShape(lherrs) {
				t.Errorf("the summaries differ:\nthrough the daemon:\n%s%s\nin-process:\n%s%s", hout, herrs, lhout, lherrs)
			}
		})
	}
}

// TestRunDaemonNotThere: without a daemon of this install, auto runs
// in-process and --via daemon refuses (exit 1, saying why), nothing run: no
// daemon at all, or one that records its trials in another store (its
// trials could not be shown or committed from here).
func TestRunDaemonNotThere(t *testing.T) {
	requireNS(t)
	other := startTestDaemon(t, t.TempDir())
	tests := []struct {
		name    string
		runtime string
		via     string
		want    int
		errWant string
	}{
		{"no daemon, auto", t.TempDir(), "auto", 0, ""},
		{"no daemon, --via daemon", t.TempDir(), "daemon", ExitRefused, "nothing listens on"},
		{"another store's daemon, auto", other.runtime, "auto", 0, ""},
		{"another store's daemon, --via daemon", other.runtime, "daemon", ExitRefused, "records its trials in"},
		{"bad --via", t.TempDir(), "sometimes", ExitUsage, "want auto"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			home := t.TempDir()
			code, out, errs := cliWith(t, home, map[string]string{"XDG_RUNTIME_DIR": tt.runtime}, "run", "--json", "--via", tt.via, "-C", t.TempDir(), "--", "true")
			if code != tt.want || !strings.Contains(errs, tt.errWant) {
				t.Fatalf("exit %d, want %d; stderr %q, want %q", code, tt.want, errs, tt.errWant)
			}
			if code == 0 && other.ran(decode(t, out).TrialID) {
				t.Error("the other store's daemon ran the trial")
			}
			if code != 0 && out != "" {
				t.Errorf("a refused run printed %q", out)
			}
		})
	}
}

// TestRunDaemonLiveAndInterrupt: through the daemon, the command's output
// reaches the terminal while it runs: the command below prints "ready" and
// then sleeps for a minute, and the output writer interrupts the run (as
// Ctrl-C does) when it sees "ready" — only live output lets the run end
// before the minute. The interrupted run exits 130 and says what became of
// the trial; the daemon killed it and kept nothing.
func TestRunDaemonLiveAndInterrupt(t *testing.T) {
	requireNS(t)
	home := t.TempDir()
	d := startTestDaemon(t, home)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	out := &cancelOn{marker: "ready", cancel: func() { cancel(fmt.Errorf("interrupt signal received")) }}
	var errb bytes.Buffer
	vars := map[string]string{"DRYEXEC_HOME": home, "XDG_RUNTIME_DIR": d.runtime, "PATH": "/usr/bin:/bin"}
	start := time.Now()
	code := Run(ctx, []string{"run", "--via", "daemon", "-C", t.TempDir(), "--", "sh", "-c", "echo ready; exec sleep 60"},
		Env{Stdin: strings.NewReader(""), Stdout: out, Stderr: &errb, Getenv: func(k string) string { return vars[k] }})
	if took := time.Since(start); took > 50*time.Second {
		t.Fatalf("the run took %s: the output was not live", took)
	}
	if code != ExitInterrupted || !strings.Contains(errb.String(), "was stopped before it finished; nothing of it was kept") {
		t.Fatalf("exit %d, want %d; stderr %s", code, ExitInterrupted, errb.String())
	}
	id := trialIDs.FindString(errb.String())
	// The daemon ends the trial once it sees the stream closed: wait for
	// it to have no trial running, then look for what it kept.
	deadline := time.Now().Add(30 * time.Second)
	for d.running(t, home) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := d.running(t, home); n > 0 {
		t.Fatalf("the daemon still runs %d trial(s) 30 s after the client went", n)
	}
	if _, err := os.Stat(filepath.Join(home, "trials", id)); err == nil {
		t.Errorf("the interrupted trial %s was stored", id)
	}
}

// cancelOn is an output that calls cancel once what it received contains
// marker.
type cancelOn struct {
	mu     sync.Mutex
	buf    bytes.Buffer
	marker string
	once   sync.Once
	cancel func()
}

func (c *cancelOn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf.Write(p)
	if strings.Contains(c.buf.String(), c.marker) {
		c.once.Do(c.cancel)
	}
	return len(p), nil
}

// TestRunDaemonCommit: --commit after a trial the daemon ran commits it from
// the store they share: the host gets the file.
func TestRunDaemonCommit(t *testing.T) {
	requireNS(t)
	home, dir := t.TempDir(), t.TempDir()
	d := startTestDaemon(t, home)
	code, out, errs := cliWith(t, home, map[string]string{"XDG_RUNTIME_DIR": d.runtime}, "run", "--json", "--commit", "-C", dir, "--", "sh", "-c", "echo hi > x.txt")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if id := decode(t, out).TrialID; !d.ran(id) {
		t.Fatalf("the daemon did not run %s", id)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "x.txt")); err != nil || string(b) != "hi\n" {
		t.Fatalf("committed file: %q %v", b, err)
	}
}

// TestDaemonRequestPolicy: the policy a --policy file gives is the one the
// daemon decodes from the request (policy.Parse of its JSON).
func TestDaemonRequestPolicy(t *testing.T) {
	p, err := policy.Parse([]byte("rules:\n  - {name: r, expr: 'delta.process.exit_code != 0', result: block, reason: failed}\n"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	back, err := policy.Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(p, back) {
		t.Fatalf("the policy does not survive the request:\n%+v\n%+v", p, back)
	}
}

// TestDaemonCarriesOnlyText: the daemon's API is JSON, which would turn
// every byte of a request that is not UTF-8 into U+FFFD, so that the trial
// ran another command than the one asked. A run whose argument, directory
// or variable is not UTF-8 therefore runs in-process under --via auto,
// through the engine and through the front (which leaves it to the engine),
// with its bytes unchanged; --via daemon refuses it, and --stdin input that
// is not UTF-8, as a usage error.
func TestDaemonCarriesOnlyText(t *testing.T) {
	requireNS(t)
	home := t.TempDir()
	d := startTestDaemon(t, home)
	dir := t.TempDir()
	odd := filepath.Join(dir, "d\xe9")
	if err := os.Mkdir(odd, 0o755); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"XDG_RUNTIME_DIR": d.runtime}
	for _, tt := range []struct {
		name string
		vars map[string]string
		args []string
		want string
	}{
		{"an argument", nil, []string{"run", "-C", dir, "--", "sh", "-c", `printf "<%s>" "$1"`, "x", "caf\xe9"}, "<caf\xe9>"},
		{"the directory", nil, []string{"run", "-C", odd, "--", "sh", "-c", `printf "<%s>" "$PWD"`}, "<" + odd + ">"},
		{"a variable", map[string]string{"V": "v\xe9"}, []string{"run", "-C", dir, "--env", "V", "--", "sh", "-c", `printf "<%s>" "$V"`}, "<v\xe9>"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			vs := map[string]string{}
			for k, v := range vars {
				vs[k] = v
			}
			for k, v := range tt.vars {
				vs[k] = v
			}
			code, handled, _, _ := frontWith(t, home, vs, tt.args...)
			if handled {
				t.Fatalf("the front sent it to the daemon (exit %d)", code)
			}
			before := d.log.String()
			code, out, errs := cliWith(t, home, vs, tt.args...)
			if code != 0 || !strings.Contains(out, tt.want) {
				t.Fatalf("exit %d; stdout %q, want %q; stderr %s", code, out, tt.want, errs)
			}
			if d.log.String() != before {
				t.Errorf("the daemon ran it: %s", strings.TrimPrefix(d.log.String(), before))
			}
			args := append([]string{"run", "--via", "daemon"}, tt.args[1:]...)
			code, _, errs = cliWith(t, home, vs, args...)
			if code != ExitUsage || !strings.Contains(errs, "not valid UTF-8") {
				t.Fatalf("--via daemon: exit %d, want %d; stderr %s", code, ExitUsage, errs)
			}
		})
	}
}
