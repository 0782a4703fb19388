package network

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dryexec/dryexec/internal/testwait"
	"github.com/dryexec/dryexec/netsim/netproc"
	"github.com/dryexec/dryexec/rung/linuxns"
)

// TestNetsimKilledMidTrial: killing the netsim process while a trial runs
// ends that trial's network, not the trial nor this process: the trial
// returns a delta, marked incomplete (so decided block) with the reason, that
// keeps what was logged before the kill; the command's later attempt reaches
// nothing.
func TestNetsimKilledMidTrial(t *testing.T) {
	requireTUN(t)
	dir := t.TempDir()
	mock := filepath.Join(dir, "mock.yaml")
	if err := os.WriteFile(mock, []byte("routes:\n  - host: api.example.com\n    path: /v1/ping\n    json: {pong: true}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := netSpec(t, "mock:"+mock)
	out := &testwait.Buffer{}
	in, feed := io.Pipe()
	spec.Stdout, spec.Stdin = out, in
	spec.Action.Argv = []string{"sh", "-c", `curl -sS https://api.example.com/v1/ping; echo; echo READY; read x; ` +
		`curl -sS -m 3 https://api.example.com/v1/ping || echo AFTER-KILL-FAILED`}
	spec.Action.Cwd = dir
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	done := make(chan struct{})
	var trialErr error
	var incomplete bool
	var reason, stdout string
	var network []string
	go func() {
		defer close(done)
		d, err := (&linuxns.Rung{}).Trial(ctx, spec)
		trialErr = err
		if d != nil {
			incomplete, reason, stdout = d.Incomplete, d.IncompleteReason, d.Process.Stdout
			for _, e := range d.Network {
				if e.URL != "" { // the DNS queries aside
					network = append(network, e.URL+" "+e.Action)
				}
			}
		}
	}()
	testwait.For(t, time.Minute, "the command's first request", func() bool { return strings.Contains(out.String(), "READY") })
	pids := netproc.Children(os.Getpid())
	if len(pids) != 1 {
		t.Fatalf("netsim processes of this test: %v, want one", pids)
	}
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	feed.Write([]byte("go\n"))
	feed.Close()
	<-done
	if trialErr != nil {
		t.Fatalf("the trial failed: %v", trialErr)
	}
	if !strings.Contains(stdout, `"pong":true`) || !strings.Contains(stdout, "AFTER-KILL-FAILED") {
		t.Errorf("stdout %q: want the mocked answer before the kill and a failed request after it", stdout)
	}
	if !incomplete || !strings.Contains(reason, "network ended early") || !strings.Contains(reason, "killed") {
		t.Errorf("delta incomplete=%v reason %q: want incomplete, saying netsim was killed", incomplete, reason)
	}
	if len(network) != 1 || network[0] != "https://api.example.com/v1/ping mocked" {
		t.Errorf("network log %q: want the one HTTP request before the kill", network)
	}
}

// TestNetsimKilledMidSession: killing a session's netsim process ends that
// session's network, not the session: the exec after the kill still runs,
// its request reaches nothing, and its result and the session's warnings say
// the network ended early (so the exec's log is not taken for the whole of
// what it tried).
func TestNetsimKilledMidSession(t *testing.T) {
	requireTUN(t)
	dir := t.TempDir()
	mock := filepath.Join(dir, "mock.yaml")
	if err := os.WriteFile(mock, []byte("routes:\n  - host: api.example.com\n    path: /v1/ping\n    json: {pong: true}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := openNetSession(t, "mock:"+mock)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	r, err := s.Shell(ctx, "curl -sS https://api.example.com/v1/ping", time.Minute)
	if err != nil || !strings.Contains(r.Stdout, `"pong":true`) {
		t.Fatalf("before the kill: %v, %+v", err, r)
	}
	for _, w := range append(r.Warnings, s.Warnings()...) {
		if strings.Contains(w, "network ended early") {
			t.Fatalf("warning %q before netsim was killed", w)
		}
	}
	pids := netproc.Children(os.Getpid())
	if len(pids) != 1 {
		t.Fatalf("netsim processes of this test: %v, want one", pids)
	}
	if err := syscall.Kill(pids[0], syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testwait.For(t, time.Minute, "the session to see netsim gone", func() bool {
		for _, w := range s.Warnings() {
			if strings.Contains(w, "network ended early") && strings.Contains(w, "killed") {
				return true
			}
		}
		return false
	})
	r, err = s.Shell(ctx, "curl -sS -m 3 https://api.example.com/v1/ping || echo AFTER-KILL-FAILED", time.Minute)
	if err != nil {
		t.Fatalf("the exec after the kill: %v", err)
	}
	if !strings.Contains(r.Stdout, "AFTER-KILL-FAILED") {
		t.Errorf("stdout %q: want the request after the kill to fail", r.Stdout)
	}
	if !slices.ContainsFunc(r.Warnings, func(w string) bool { return strings.Contains(w, "network ended early") }) {
		t.Errorf("the exec's warnings %q do not say the network ended early", r.Warnings)
	}
}
