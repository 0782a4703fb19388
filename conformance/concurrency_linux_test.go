package conformance

import (
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dryexec/dryexec/session"
)

var concurrencyCases = []conformanceCase{
	// Two sessions used at the same time see only their own files, and each
	// diff holds only its own writes.
	{"two_sessions_isolated", func(t *testing.T, open opener) {
		ss := []*session.Session{openDefault(t, open), open(t, session.Options{})}
		var wg sync.WaitGroup
		errs := make([]error, len(ss))
		for i, s := range ss {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for j := 0; j < 5; j++ {
					r, err := s.Shell(ctx(t), fmt.Sprintf("echo %d-%d > s%d-%d; sleep 0.05; ls -A", i, j, i, j), shellTimeout)
					if err != nil {
						errs[i] = err
						return
					}
					var want []string
					for k := 0; k <= j; k++ {
						want = append(want, fmt.Sprintf("s%d-%d", i, k))
					}
					if got := strings.Fields(r.Stdout); strings.Join(got, " ") != strings.Join(want, " ") {
						errs[i] = fmt.Errorf("session %d sees %q, want %q", i, got, want)
						return
					}
				}
			}()
		}
		wg.Wait()
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		for i, s := range ss {
			w := want{writes: map[string]string{}}
			for j := 0; j < 5; j++ {
				w.writes[fmt.Sprintf("s%d-%d", i, j)] = fmt.Sprintf("%d-%d\n", i, j)
			}
			checkDiff(t, getDiff(t, s, false), w)
		}
	}},
	// Shell calls made at once on one session run one after the other: all
	// complete, and no exec's output or state is mixed with another's.
	{"concurrent_shell_calls_serialised", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		const n = 4
		res := make([]string, n)
		errs := make([]error, n)
		var wg sync.WaitGroup
		start := time.Now()
		for i := 0; i < n; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				r, err := s.Shell(ctx(t), fmt.Sprintf("echo begin-%d >> log; echo out-%d; sleep 0.2; echo err-%d >&2; echo end-%d >> log", i, i, i, i), shellTimeout)
				if err != nil {
					errs[i] = err
					return
				}
				if r.ExitCode != 0 || r.Stderr != fmt.Sprintf("err-%d\n", i) {
					errs[i] = fmt.Errorf("exec %d: %+v", i, r)
				}
				res[i] = r.Stdout
			}()
		}
		wg.Wait()
		for i := 0; i < n; i++ {
			if errs[i] != nil {
				t.Fatal(errs[i])
			}
			if res[i] != fmt.Sprintf("out-%d\n", i) {
				t.Errorf("exec %d stdout %q", i, res[i])
			}
		}
		if took := time.Since(start); took < n*200*time.Millisecond {
			t.Errorf("%d execs of 0.2s took %v: they ran at the same time", n, took)
		}
		log := strings.Fields(run(t, s, "cat log"))
		if len(log) != 2*n {
			t.Fatalf("log %q", log)
		}
		for k := 0; k < len(log); k += 2 {
			id, _ := strings.CutPrefix(log[k], "begin-")
			if log[k+1] != "end-"+id {
				t.Fatalf("execs interleaved: %q", log)
			}
		}
	}},
	// Diffs and pings made while an exec runs wait for it (or answer), and see
	// a consistent state afterwards.
	{"calls_during_exec", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		done := make(chan error, 1)
		// The exec blocks in a sleep only this test runs, which the test ends
		// itself: the calls are made during the exec.
		marker := uniqueSleep()
		go func() {
			r, err := s.Shell(ctx(t), marker+"; echo x > f", shellTimeout)
			if err == nil && r.ExitCode != 0 {
				err = fmt.Errorf("exit %d", r.ExitCode)
			}
			done <- err
		}()
		pids := waitRunning(t, marker, 1)
		// A ping and a diff asked for during the exec wait for it (both
		// rungs): they see what the exec writes after the sleep this test
		// ends, and nothing fails.
		type diffResult struct {
			d   *session.Diff
			err error
		}
		pingc, diffc := make(chan error, 1), make(chan diffResult, 1)
		go func() {
			_, err := s.Ping(ctx(t))
			pingc <- err
		}()
		go func() {
			d, err := s.Diff(ctx(t), false)
			diffc <- diffResult{d, err}
		}()
		select {
		case err := <-done:
			t.Fatalf("the exec ended (%v) before its sleep was ended", err)
		default:
		}
		for _, p := range pids {
			syscall.Kill(p, syscall.SIGKILL)
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if err := <-pingc; err != nil {
			t.Fatal(err)
		}
		r := <-diffc
		if r.err != nil {
			t.Fatal(r.err)
		}
		checkDiff(t, r.d, want{writes: map[string]string{"f": "x\n"}})
		checkDiff(t, getDiff(t, s, false), want{writes: map[string]string{"f": "x\n"}})
	}},
}
