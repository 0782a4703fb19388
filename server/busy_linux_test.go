package server_test

import (
	"sync"
	"testing"

	"github.com/dryexec/dryexec/server"
)

// busyLog records what Config.Busy is told.
type busyLog struct {
	mu           sync.Mutex
	began, ended map[bool]int // by background
	storedAtEnd  []int        // trials stored when each request ended
	stored       func() int
}

func (b *busyLog) busy(background bool) func() {
	b.mu.Lock()
	b.began[background]++
	b.mu.Unlock()
	return func() {
		n := -1
		if !background && b.stored != nil {
			n = b.stored()
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		b.ended[background]++
		if !background {
			b.storedAtEnd = append(b.storedAtEnd, n)
		}
	}
}

func (b *busyLog) counts() (began, ended map[bool]int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	began, ended = map[bool]int{}, map[bool]int{}
	for k, v := range b.began {
		began[k] = v
	}
	for k, v := range b.ended {
		ended[k] = v
	}
	return began, ended
}

// TestBusyTellsWork: Config.Busy (what sizes dryexec serve's GOMAXPROCS) is
// told of each sandbox the pool prepares, as background work, and of each
// request that may run something, which ends only after its trial is
// recorded; a GET is not counted.
func TestBusyTellsWork(t *testing.T) {
	requireNS(t)
	log := &busyLog{began: map[bool]int{}, ended: map[bool]int{}}
	d := startDaemon(t, server.Config{Pool: 1, Busy: log.busy}, server.HandlerOptions{})
	log.mu.Lock()
	log.stored = func() int {
		list, err := d.svc.Trials()
		if err != nil {
			return -1
		}
		return len(list)
	}
	log.mu.Unlock()
	waitPoolQuiet(t, d)
	began, ended := log.counts()
	if began[true] < 1 || ended[true] != began[true] {
		t.Fatalf("after the pool filled: %d preparations begun, %d ended; want ≥ 1, all ended", began[true], ended[true])
	}
	if began[false] != 0 {
		t.Fatalf("GET /v1/health (waitPoolQuiet) counted as %d requests, want none", began[false])
	}
	var delta struct {
		TrialID string `json:"trial_id"`
	}
	d.ok(t, "POST", "/v1/trials", server.TrialRequest{Argv: []string{"/bin/true"}, Cwd: t.TempDir()}, 201, &delta)
	began, ended = log.counts()
	if began[false] != 1 || ended[false] != 1 {
		t.Fatalf("POST /v1/trials: %d requests begun, %d ended; want 1 and 1", began[false], ended[false])
	}
	log.mu.Lock()
	atEnd := log.storedAtEnd[0]
	log.mu.Unlock()
	if atEnd != 1 {
		t.Fatalf("the request ended with %d trials stored, want 1 (%s): it must end after its trial is recorded", atEnd, delta.TrialID)
	}
}
