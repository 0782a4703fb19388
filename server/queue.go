package server

import (
	"context"
	"fmt"
	"sync"
)

// queue bounds concurrent trials: n slots, and at most maxWait callers waiting
// for one. Waiting callers are served in no particular order.
type queue struct {
	slots   chan struct{}
	maxWait int

	mu      sync.Mutex // guards waiting
	waiting int
}

func newQueue(n, maxWait int) *queue {
	return &queue{slots: make(chan struct{}, n), maxWait: maxWait}
}

// acquire takes a slot, waiting (and calling queued once) if none is free; it
// fails with ErrBusy when the queue is full and with ctx's error if ctx ends
// first. The returned func gives the slot back.
func (q *queue) acquire(ctx context.Context, queued func()) (func(), error) {
	release := func() { <-q.slots }
	select {
	case q.slots <- struct{}{}:
		return release, nil
	default:
	}
	q.mu.Lock()
	if q.waiting >= q.maxWait {
		q.mu.Unlock()
		return nil, fmt.Errorf("%w: %d trials running and %d waiting (the limits); retry later", ErrBusy, cap(q.slots), q.maxWait)
	}
	q.waiting++
	q.mu.Unlock()
	defer func() {
		q.mu.Lock()
		q.waiting--
		q.mu.Unlock()
	}()
	if queued != nil {
		queued()
	}
	select {
	case q.slots <- struct{}{}:
		return release, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

func (q *queue) counts() (running, waiting int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return len(q.slots), q.waiting
}
