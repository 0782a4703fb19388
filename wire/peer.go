package wire

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
)

// ErrClosed means the stream broke or was closed: the peer is gone (a different
// thing from a RemoteError, which the peer sent on purpose).
var ErrClosed = errors.New("wire: connection closed")

// Handler answers one request from the peer. It returns the response body (any
// JSON-encodable value, or nil) and attachments, or an error; an error that is a
// *RemoteError goes back as is, any other as code "internal".
type Handler func(ctx context.Context, f *Frame) (body any, bin [][]byte, err error)

// Peer is one end of a symmetric request/response conversation: either side may
// call the other while its own calls are outstanding (the guest asks the host for
// cache values in the middle of an exec). A response answers the request with the
// same ID from the other side, so the two sides number independently.
type Peer struct {
	conn    *Conn
	handler Handler

	mu      sync.Mutex // guards the fields below
	nextID  uint64
	pending map[uint64]chan *Frame
	err     error // set once the stream is done; every later Call fails with it

	done chan struct{} // closed when Run returns
}

// NewPeer returns a Peer on conn; h answers the peer's requests (nil refuses all).
func NewPeer(conn *Conn, h Handler) *Peer {
	return &Peer{conn: conn, handler: h, pending: map[uint64]chan *Frame{}, done: make(chan struct{})}
}

// Run reads frames until the stream ends or ctx is done, dispatching requests to
// the handler (each in its own goroutine) and responses to their callers. It
// returns the reason the stream ended.
func (p *Peer) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var handlers sync.WaitGroup
	err := p.loop(ctx, &handlers)
	p.fail(err)
	handlers.Wait()
	close(p.done)
	return err
}

func (p *Peer) loop(ctx context.Context, handlers *sync.WaitGroup) error {
	for {
		f, err := p.conn.Read()
		if err != nil {
			return fmt.Errorf("%w: %w", ErrClosed, err)
		}
		switch f.Kind {
		case KindReq, KindEvent:
			handlers.Add(1)
			go func() {
				defer handlers.Done()
				p.serve(ctx, f)
			}()
		case KindResp, KindErr:
			p.mu.Lock()
			ch := p.pending[f.ID]
			delete(p.pending, f.ID)
			issued := f.ID != 0 && f.ID <= p.nextID
			p.mu.Unlock()
			switch {
			case ch != nil:
				ch <- f
			case !issued:
				return fmt.Errorf("%w: response to request %d, which was never sent", ErrProtocol, f.ID)
			}
			// else: an answer to a call abandoned by its context.
		default:
			return fmt.Errorf("%w: unexpected %s frame", ErrProtocol, f.Kind)
		}
	}
}

func (p *Peer) serve(ctx context.Context, f *Frame) {
	var body any
	var bin [][]byte
	err := &RemoteError{Code: "unsupported", Message: "no handler for " + f.Verb}
	if p.handler != nil {
		var herr error
		body, bin, herr = p.handler(ctx, f)
		err = nil
		if herr != nil {
			if !errors.As(herr, &err) {
				err = &RemoteError{Code: "internal", Message: herr.Error()}
			}
		}
	}
	if f.Kind == KindEvent {
		return
	}
	if err != nil {
		p.conn.Send(KindErr, f.Verb, f.ID, err)
		return
	}
	if serr := p.conn.Send(KindResp, f.Verb, f.ID, body, bin...); serr != nil && errors.Is(serr, ErrProtocol) {
		// The answer cannot be framed (too large): the caller must still get
		// one, or it would wait forever.
		p.conn.Send(KindErr, f.Verb, f.ID, &RemoteError{Code: "too_large", Message: serr.Error()})
	}
}

func (p *Peer) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		p.err = err
	}
	for id, ch := range p.pending {
		close(ch)
		delete(p.pending, id)
	}
}

// Call sends a request and waits for its response. A *RemoteError means the peer
// refused; an error wrapping ErrClosed means the peer is gone. Cancelling ctx
// abandons the wait (the peer may still act on the request).
func (p *Peer) Call(ctx context.Context, verb string, body any, bin ...[]byte) (*Frame, error) {
	p.mu.Lock()
	if p.err != nil {
		err := p.err
		p.mu.Unlock()
		return nil, err
	}
	p.nextID++
	id := p.nextID
	ch := make(chan *Frame, 1)
	p.pending[id] = ch
	p.mu.Unlock()
	if err := p.conn.Send(KindReq, verb, id, body, bin...); err != nil {
		p.mu.Lock()
		delete(p.pending, id)
		p.mu.Unlock()
		if errors.Is(err, ErrProtocol) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", ErrClosed, err)
	}
	select {
	case f, ok := <-ch:
		if !ok {
			p.mu.Lock()
			err := p.err
			p.mu.Unlock()
			return nil, err
		}
		if f.Kind == KindErr {
			re := &RemoteError{Code: "internal", Message: "unreadable error from peer"}
			if len(f.Body) > 0 {
				json.Unmarshal(f.Body, re)
			}
			return nil, re
		}
		return f, nil
	case <-ctx.Done():
		p.mu.Lock()
		delete(p.pending, id)
		p.mu.Unlock()
		return nil, ctx.Err()
	}
}

// Notify sends a one-way event.
func (p *Peer) Notify(verb string, body any, bin ...[]byte) error {
	return p.conn.Send(KindEvent, verb, 0, body, bin...)
}

// Done is closed when Run has returned.
func (p *Peer) Done() <-chan struct{} { return p.done }
