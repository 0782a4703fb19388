package session

import (
	"context"
	"testing"
	"time"
)

// BenchmarkPythonRoundTrip measures one exec_python round trip (a trivial
// call) with the pre-started runner and with a runner started for the call
// (PythonOptions.Fresh, the old behaviour), side by side in one run:
//
//	go test ./session -run '^$' -bench PythonRoundTrip -benchtime 40x -count 3
//
// think: the caller pauses between calls (100 ms, not timed), as an agent
// does while it reads a result, so the next runner is up when the call comes.
// back_to_back: calls follow each other at once, so a call may wait for the
// rest of its runner's startup.
func BenchmarkPythonRoundTrip(b *testing.B) {
	for _, rung := range []string{"host", "ns"} {
		b.Run(rung, func(b *testing.B) {
			for _, pace := range []struct {
				name  string
				pause time.Duration
			}{{"think", 100 * time.Millisecond}, {"back_to_back", 0}} {
				b.Run(pace.name, func(b *testing.B) {
					for _, mode := range []struct {
						name  string
						fresh bool
					}{{"prestarted", false}, {"fresh", true}} {
						b.Run(mode.name, func(b *testing.B) {
							benchPython(b, rung, pace.pause, mode.fresh)
						})
					}
				})
			}
		})
	}
}

func benchPython(b *testing.B, rung string, pause time.Duration, fresh bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	s, err := Open(ctx, Options{Rung: rung})
	if err != nil {
		b.Fatalf("opening a %s session: %v", rung, err)
	}
	defer s.Close()
	opt := PythonOptions{Timeout: time.Minute, Fresh: fresh}
	call := func() {
		r, err := s.PythonWith(ctx, "x = 1", nil, opt)
		if err != nil || !r.OK {
			b.Fatalf("Python: %v %+v", err, r)
		}
	}
	call() // the first call of a session
	b.ResetTimer()
	for range b.N {
		if pause > 0 {
			b.StopTimer()
			time.Sleep(pause)
			b.StartTimer()
		}
		call()
	}
}
