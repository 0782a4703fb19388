package server_test

import (
	"context"
	"testing"

	"github.com/dryexec/dryexec/server"
)

// API overhead per trial and per session exec: each pair runs the same work
// in-process (Service / session.Session) and through the daemon's socket;
// the difference is what the HTTP API costs. Run with
//   go test ./server -run '^$' -bench . -benchtime 20x
// Trials are noisy (±30% here): compare the pairs of one run.

func BenchmarkTrialInProcess(b *testing.B) {
	requireNS(b)
	d := startDaemon(b, server.Config{}, server.HandlerOptions{})
	wd := b.TempDir()
	req := server.TrialRequest{Argv: []string{"/bin/true"}, Cwd: wd}
	for b.Loop() {
		if _, err := d.svc.RunTrial(context.Background(), req, server.TrialHooks{}); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkTrialHTTP(b *testing.B) {
	requireNS(b)
	d := startDaemon(b, server.Config{}, server.HandlerOptions{})
	wd := b.TempDir()
	req := server.TrialRequest{Argv: []string{"/bin/true"}, Cwd: wd}
	for b.Loop() {
		d.ok(b, "POST", "/v1/trials", req, 201, nil)
	}
}

func openBenchSession(b *testing.B, d *daemon) *server.Live {
	var info server.SessionInfo
	d.ok(b, "POST", "/v1/sessions", server.SessionRequest{Rung: "ns"}, 201, &info)
	l, err := d.svc.Session(info.SessionID)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

func BenchmarkSessionShellInProcess(b *testing.B) {
	requireNS(b)
	d := startDaemon(b, server.Config{}, server.HandlerOptions{})
	l := openBenchSession(b, d)
	for b.Loop() {
		if _, err := l.Session.Shell(context.Background(), "true", 0); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSessionShellHTTP(b *testing.B) {
	requireNS(b)
	d := startDaemon(b, server.Config{}, server.HandlerOptions{})
	l := openBenchSession(b, d)
	for b.Loop() {
		d.ok(b, "POST", "/v1/sessions/"+l.ID+"/shell", server.ShellRequest{Command: "true"}, 200, nil)
	}
}

// The API's own cost, without a sandbox's noise: a ping of a live session's
// guest in-process and through the socket, and a bare health check.
func BenchmarkSessionPingInProcess(b *testing.B) {
	requireNS(b)
	d := startDaemon(b, server.Config{}, server.HandlerOptions{})
	l := openBenchSession(b, d)
	for b.Loop() {
		if _, err := l.Session.Ping(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSessionPingHTTP(b *testing.B) {
	requireNS(b)
	d := startDaemon(b, server.Config{}, server.HandlerOptions{})
	l := openBenchSession(b, d)
	for b.Loop() {
		d.ok(b, "POST", "/v1/sessions/"+l.ID+"/ping", nil, 200, nil)
	}
}

func BenchmarkHealthHTTP(b *testing.B) {
	d := startDaemon(b, server.Config{}, server.HandlerOptions{})
	for b.Loop() {
		d.ok(b, "GET", "/v1/health", nil, 200, nil)
	}
}
