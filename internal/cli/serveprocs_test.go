package cli

import (
	"runtime"
	"testing"
)

// TestDaemonProcs: the daemon's GOMAXPROCS follows its work — one P idle
// and for a single request, every CPU for two requests or background work
// — and $GOMAXPROCS, when set, turns that off.
func TestDaemonProcs(t *testing.T) {
	if daemonProcs(Env{Getenv: func(k string) string { return map[string]string{"GOMAXPROCS": "3"}[k] }}) != nil {
		t.Fatal("$GOMAXPROCS set: the daemon still sets its own")
	}
	full := runtime.GOMAXPROCS(0)
	defer runtime.GOMAXPROCS(full)
	if full < 2 {
		// The runtime takes more Ps than CPUs.
		runtime.GOMAXPROCS(2)
		full = 2
	}
	busy := daemonProcs(Env{Getenv: func(string) string { return "" }})
	if busy == nil {
		t.Fatal("no $GOMAXPROCS: daemonProcs returned nil")
	}
	procs := func(when string, want int) {
		t.Helper()
		if got := runtime.GOMAXPROCS(0); got != want {
			t.Fatalf("%s: GOMAXPROCS %d, want %d", when, got, want)
		}
	}
	procs("idle", 1)
	first := busy(false)
	procs("one request", 1)
	second := busy(false)
	procs("two requests", full)
	second()
	procs("one request left", 1)
	bg := busy(true)
	procs("a request and a preparation", full)
	first()
	procs("a preparation alone", full)
	bg()
	procs("idle again", 1)
}
