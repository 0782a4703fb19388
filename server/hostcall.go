package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"time"

	"github.com/dryexec/dryexec/wire"
)

// HostCall is one guest call of a host object, waiting for the client that
// serves the object (GET /v1/sessions/{id}/hostcalls).
type HostCall struct {
	CallID string       `json:"call_id"`
	Object string       `json:"object"`
	Method string       `json:"method"`
	Args   []wire.Value `json:"args"`
	// Kwargs are keyword arguments (identifiers, never "_..."; checked by
	// the session before the call is queued).
	Kwargs map[string]wire.Value `json:"kwargs,omitempty"`

	answer chan HostAnswer
}

// HostAnswer is the client's answer to a HostCall: Value, or Error.
type HostAnswer struct {
	Value *wire.Value     `json:"value,omitempty"`
	Error *HostCallFailed `json:"error,omitempty"`
}

// HostCallFailed is a refused or failed host call. Code is what Python raises
// in the sandbox: permission (PermissionError), type (TypeError) or host_error
// (RuntimeError).
type HostCallFailed struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// maxPendingCalls bounds calls queued for the client: a guest that calls in a
// loop while no client polls waits rather than growing the queue.
const maxPendingCalls = 64

// hostQueue hands a session's host calls to its client and their answers back.
type hostQueue struct {
	pending chan *HostCall
	timeout time.Duration
	done    chan struct{} // closed by close

	mu       sync.Mutex // guards inflight and closed
	inflight map[string]*HostCall
	closed   bool
}

func newHostQueue(timeout time.Duration) *hostQueue {
	return &hostQueue{pending: make(chan *HostCall, maxPendingCalls), timeout: timeout,
		done: make(chan struct{}), inflight: map[string]*HostCall{}}
}

func (q *hostQueue) close() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.closed {
		q.closed = true
		close(q.done)
	}
}

// next waits until ctx ends for a call to hand to the client; nil if none.
func (q *hostQueue) next(ctx context.Context) *HostCall {
	select {
	case c := <-q.pending:
		return c
	case <-ctx.Done():
	case <-q.done:
	}
	return nil
}

// answer delivers the client's answer to call id; false if no such call waits.
func (q *hostQueue) answer(id string, a HostAnswer) bool {
	q.mu.Lock()
	c := q.inflight[id]
	delete(q.inflight, id)
	q.mu.Unlock()
	if c == nil {
		return false
	}
	c.answer <- a // buffered: the caller may have given up already
	return true
}

// forwarder is a session.Dispatcher: the session has already checked the
// method against the allowlist; the call waits for the client's answer.
type forwarder struct {
	q      *hostQueue
	object string
}

func (f *forwarder) CallMethod(ctx context.Context, method string, args []wire.Value) (wire.Value, error) {
	return f.CallMethodKw(ctx, method, args, nil)
}

// CallMethodKw makes forwarder a session.KwDispatcher: the client calls the
// real object with the keyword arguments.
func (f *forwarder) CallMethodKw(ctx context.Context, method string, args []wire.Value, kwargs map[string]wire.Value) (wire.Value, error) {
	var idb [12]byte
	rand.Read(idb[:])
	c := &HostCall{CallID: "hc_" + hex.EncodeToString(idb[:]), Object: f.object, Method: method, Args: args, Kwargs: kwargs, answer: make(chan HostAnswer, 1)}
	if c.Args == nil {
		c.Args = []wire.Value{}
	}
	ctx, cancel := context.WithTimeout(ctx, f.q.timeout)
	defer cancel()
	f.q.mu.Lock()
	if f.q.closed {
		f.q.mu.Unlock()
		return wire.Value{}, &wire.RemoteError{Code: "host_error", Message: "the session is closing"}
	}
	f.q.inflight[c.CallID] = c
	f.q.mu.Unlock()
	defer func() {
		f.q.mu.Lock()
		delete(f.q.inflight, c.CallID)
		f.q.mu.Unlock()
	}()
	select {
	case f.q.pending <- c:
	case <-ctx.Done():
		return wire.Value{}, &wire.RemoteError{Code: "host_error", Message: "no client is serving host object " + f.object + " (nobody polls this session's host calls)"}
	case <-f.q.done:
		return wire.Value{}, &wire.RemoteError{Code: "host_error", Message: "the session is closing"}
	}
	select {
	case a := <-c.answer:
		if a.Error != nil {
			code := a.Error.Code
			if code != "permission" && code != "type" {
				code = "host_error"
			}
			return wire.Value{}, &wire.RemoteError{Code: code, Message: a.Error.Message}
		}
		if a.Value == nil {
			return wire.Value{Type: "json"}, nil
		}
		return *a.Value, nil
	case <-ctx.Done():
		return wire.Value{}, &wire.RemoteError{Code: "host_error", Message: "the client serving host object " + f.object + " did not answer in time"}
	case <-f.q.done:
		return wire.Value{}, &wire.RemoteError{Code: "host_error", Message: "the session is closing"}
	}
}
