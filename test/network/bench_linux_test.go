package network

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/netsim/tun"
	"github.com/dryexec/dryexec/rung/linuxns"
)

// BenchmarkMockTrial: a cold ns trial with --net mock:FILE, running true (the
// network's fixed cost: netsim's start, the TUN hand-over, its stop) and
// curl with one mocked HTTPS request (plus DNS, TLS and the log). It is the
// figure that says what running netsim as a confined process of its own
// costs: run it here and on the tree before netproc.
func BenchmarkMockTrial(b *testing.B) {
	testreq.Need(b, testreq.NS, (&linuxns.Rung{}).Available(context.Background()))
	testreq.Need(b, testreq.Netsim, tun.CheckTUN())
	dir := b.TempDir()
	mock := filepath.Join(dir, "mock.yaml")
	if err := os.WriteFile(mock, []byte("routes:\n  - host: api.example.com\n    path: /v1/ping\n    json: {pong: true}\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	caDir := filepath.Join(dir, "ca")
	for _, bc := range []struct {
		name string
		argv []string
	}{
		{"true", []string{"true"}},
		{"curl_https", []string{"curl", "-sS", "https://api.example.com/v1/ping"}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				ctx, cancel := context.WithTimeout(b.Context(), time.Minute)
				d, err := (&linuxns.Rung{}).Trial(ctx, dryexec.TrialSpec{Net: []string{"mock:" + mock}, NetCADir: caDir,
					Action: dryexec.Action{Argv: bc.argv, Cwd: dir, Env: testPath, TimeoutMS: 60_000}})
				cancel()
				if err != nil || d.Process.ExitCode != 0 {
					b.Fatalf("%v %+v", err, d)
				}
			}
		})
	}
}
