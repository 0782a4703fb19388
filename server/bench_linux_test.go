package server_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/server"
)

// API overhead per trial and per session exec (issue #8): what a request
// through the daemon's unix socket costs beyond the same work done
// in-process (Service.RunTrial, session.Session). Run with
//
//	go test ./server -run '^$' -bench Overhead -benchtime 60x
//
// A trial here takes tens of milliseconds with ±50% noise from one to the
// next (2 CPUs, nested VM, other work on the machine), while the overhead is
// well under a millisecond: two benchmarks run at different times cannot
// show it (their difference came out negative). So each benchmark below
// runs both candidates on one daemon in one loop, alternately (which goes
// first alternates too, so that neither always follows the other), and
// reports the medians of each and the median of the per-iteration
// differences (http − in-process), which cancels the drift both share.
// ns/op is the time of one pair (both calls, plus any settling between
// them) and means little; read ms-inproc, ms-http and ms-overhead. The
// min/median/max of each series is logged. Fewer than ~30 iterations give
// an overhead median of little worth: use -benchtime 60x or more.

// pairStats collects one paired benchmark's per-iteration times.
type pairStats struct{ inproc, http, diff []time.Duration }

// runPairs times inproc and overHTTP alternately for b.N iterations, each
// after settle (untimed; nil: none), and reports the medians. One untimed
// pair first opens the client's connection and warms both paths.
func runPairs(b *testing.B, settle, inproc, overHTTP func()) pairStats {
	b.Helper()
	timed := func(f func()) time.Duration {
		if settle != nil {
			settle()
		}
		t := time.Now()
		f()
		return time.Since(t)
	}
	timed(inproc)
	timed(overHTTP)
	var s pairStats
	for i := 0; b.Loop(); i++ {
		var a, h time.Duration
		if i%2 == 0 {
			a, h = timed(inproc), timed(overHTTP)
		} else {
			h, a = timed(overHTTP), timed(inproc)
		}
		s.inproc, s.http, s.diff = append(s.inproc, a), append(s.http, h), append(s.diff, h-a)
	}
	b.ReportMetric(ms(median(s.inproc)), "ms-inproc")
	b.ReportMetric(ms(median(s.http)), "ms-http")
	b.ReportMetric(ms(median(s.diff)), "ms-overhead")
	b.Logf("n=%d ms min/median/max: inproc %s  http %s  overhead(http-inproc) %s",
		len(s.diff), spread(s.inproc), spread(s.http), spread(s.diff))
	return s
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// median of xs (the mean of the middle two for an even count); 0 if empty.
func median(xs []time.Duration) time.Duration {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

func spread(xs []time.Duration) string {
	if len(xs) == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f/%.3f/%.3f", ms(slices.Min(xs)), ms(median(xs)), ms(slices.Max(xs)))
}

// BenchmarkTrialOverhead: a trial of /bin/true in-process and as POST
// /v1/trials (the delta decoded, as a client must), on one daemon, both
// through the same Service.RunTrial and so the same kind of sandbox:
//
//   - cold: Config.Pool 0, every trial builds its ns sandbox (namespaces,
//     overlays, guest) and tears it down. The sandbox dominates and its noise
//     is large next to the overhead.
//   - warm: Config.Pool 2, as `dryexec serve` runs by default. Before every
//     timed trial the benchmark waits (untimed) until the pool is full and
//     idle, so each trial takes a prepared sandbox and no refill or teardown
//     runs beside it; the benchmark fails if any trial missed the pool.
func BenchmarkTrialOverhead(b *testing.B) {
	requireNS(b)
	for _, pool := range []int{0, 2} {
		name := "cold"
		if pool > 0 {
			name = "warm"
		}
		b.Run(name, func(b *testing.B) { benchTrialOverhead(b, pool) })
	}
}

func benchTrialOverhead(b *testing.B, pool int) {
	d := startDaemon(b, server.Config{Pool: pool}, server.HandlerOptions{})
	wd := b.TempDir()
	req := server.TrialRequest{Argv: []string{"/bin/true"}, Cwd: wd}
	var settle func()
	if pool > 0 {
		settle = func() { waitPoolQuiet(b, d) }
	}
	s := runPairs(b, settle,
		func() {
			if _, err := d.svc.RunTrial(context.Background(), req, server.TrialHooks{}); err != nil {
				b.Fatal(err)
			}
		},
		func() {
			var delta dryexec.StateDelta
			d.ok(b, "POST", "/v1/trials", req, 201, &delta)
		})
	if pool > 0 {
		st := trialPoolStats(b, d)
		// The warm-up pair counts too.
		if want := 2 * (len(s.diff) + 1); st.Misses != 0 || st.Hits != want {
			b.Fatalf("warm pool: %d hits, %d misses; want %d hits, none missed", st.Hits, st.Misses, want)
		}
	}
}

type trialPoolHealth struct {
	Size, Ready, Settled, Busy, Hits, Misses int
}

func trialPoolStats(b testing.TB, d *daemon) trialPoolHealth {
	b.Helper()
	var h struct {
		Pool *trialPoolHealth `json:"pool"`
	}
	d.ok(b, "GET", "/v1/health", nil, 200, &h)
	if h.Pool == nil {
		b.Fatal("no trial pool in /v1/health")
	}
	return *h.Pool
}

// waitPoolQuiet waits (bounded) until the trial pool is full, every ready
// sandbox settled (its command stub started), and nothing is being
// prepared or torn down.
func waitPoolQuiet(b testing.TB, d *daemon) {
	b.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		st := trialPoolStats(b, d)
		if st.Ready == st.Size && st.Settled == st.Ready && st.Busy == 0 {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("the trial pool did not settle: %+v", st)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// openBenchSession opens an ns session through the API. Config.SessionPool
// is 0 in these benchmarks, so it opens cold, which does not matter: both
// sides of a pair then exec in this one live session (its guest, shell and
// overlay), in-process through Live.Session and over the socket through the
// session's routes.
func openBenchSession(b *testing.B, d *daemon) *server.Live {
	b.Helper()
	var info server.SessionInfo
	d.ok(b, "POST", "/v1/sessions", server.SessionRequest{Rung: "ns"}, 201, &info)
	l, err := d.svc.Session(info.SessionID)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// BenchmarkSessionShellOverhead: `true` in one session's shell, in-process
// and as POST /v1/sessions/{id}/shell (the answer decoded).
func BenchmarkSessionShellOverhead(b *testing.B) {
	requireNS(b)
	d := startDaemon(b, server.Config{}, server.HandlerOptions{})
	l := openBenchSession(b, d)
	runPairs(b, nil,
		func() {
			if _, err := l.Session.Shell(context.Background(), "true", 0); err != nil {
				b.Fatal(err)
			}
		},
		func() {
			var out map[string]any
			d.ok(b, "POST", "/v1/sessions/"+l.ID+"/shell", server.ShellRequest{Command: "true"}, 200, &out)
		})
}

// BenchmarkSessionPingOverhead: the API's own cost without a command's
// noise, a ping of a live session's guest in-process and through the socket.
func BenchmarkSessionPingOverhead(b *testing.B) {
	requireNS(b)
	d := startDaemon(b, server.Config{}, server.HandlerOptions{})
	l := openBenchSession(b, d)
	runPairs(b, nil,
		func() {
			if _, err := l.Session.Ping(context.Background()); err != nil {
				b.Fatal(err)
			}
		},
		func() { d.ok(b, "POST", "/v1/sessions/"+l.ID+"/ping", nil, 200, nil) })
}

// BenchmarkHealthHTTP: a bare round trip through the socket (the daemon's
// HTTP stack and the client's, no sandbox).
func BenchmarkHealthHTTP(b *testing.B) {
	d := startDaemon(b, server.Config{}, server.HandlerOptions{})
	for b.Loop() {
		d.ok(b, "GET", "/v1/health", nil, 200, nil)
	}
}
