package session

import (
	"context"
	"testing"
	"time"
)

// BenchmarkPythonRoundTrip measures one exec_python round trip (a trivial
// call) with the pre-started runner and with a runner started for the call
// (PythonOptions.Fresh, the old behaviour), interleaved in one run: each
// iteration makes one timed call on a session using pre-started runners, then
// one on a session using fresh ones, and reports each mean and their ratio:
//
//	go test ./session -run '^$' -bench PythonRoundTrip -benchtime 40x -count 3
//
// think: the caller pauses 100 ms before each timed call (not timed), as an
// agent does while it reads a result, so the next runner is up when the call
// comes. back_to_back: each timed call comes right after an untimed one on the
// same session, so it may wait for the rest of its runner's startup.
func BenchmarkPythonRoundTrip(b *testing.B) {
	for _, rung := range []string{"host", "ns"} {
		b.Run(rung, func(b *testing.B) {
			for _, pace := range []struct {
				name  string
				pause time.Duration
			}{{"think", 100 * time.Millisecond}, {"back_to_back", 0}} {
				b.Run(pace.name, func(b *testing.B) { benchPython(b, rung, pace.pause) })
			}
		})
	}
}

func benchPython(b *testing.B, rung string, pause time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	modes := []struct {
		fresh bool
		s     *Session
		total time.Duration
	}{{fresh: false}, {fresh: true}}
	for i := range modes {
		s, err := Open(ctx, Options{Rung: rung})
		if err != nil {
			b.Fatalf("opening a %s session: %v", rung, err)
		}
		defer s.Close()
		modes[i].s = s
	}
	call := func(s *Session, fresh bool) time.Duration {
		start := time.Now()
		r, err := s.PythonWith(ctx, "x = 1", nil, PythonOptions{Timeout: time.Minute, Fresh: fresh})
		if err != nil || !r.OK {
			b.Fatalf("Python: %v %+v", err, r)
		}
		return time.Since(start)
	}
	for _, m := range modes {
		call(m.s, m.fresh) // a session's first call
	}
	b.ResetTimer()
	for range b.N {
		for i := range modes {
			m := &modes[i]
			b.StopTimer()
			if pause > 0 {
				time.Sleep(pause)
			} else {
				call(m.s, m.fresh)
			}
			b.StartTimer()
			m.total += call(m.s, m.fresh)
		}
	}
	b.StopTimer()
	pre, fresh := modes[0].total.Seconds()/float64(b.N), modes[1].total.Seconds()/float64(b.N)
	b.ReportMetric(pre*1e3, "prestarted-ms/op")
	b.ReportMetric(fresh*1e3, "fresh-ms/op")
	b.ReportMetric(fresh/pre, "fresh/prestarted")
}
