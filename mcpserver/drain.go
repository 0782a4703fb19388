package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"sync"
)

// drain sits between `dryexec mcp`'s stdin/stdout and the SDK's transport
// and counts the requests read against the answers written, so that the end
// of stdin reaches the server only once every request read so far has its
// answer. Why: the server ends its session, cancelling what is in flight,
// as soon as its input ends, so a script that writes three requests and
// closes stdin (`printf … | dryexec mcp`) got 0–1 answers.
type drain struct {
	ctx     context.Context
	in      io.Reader
	out     io.Writer
	mu      sync.Mutex
	pending map[string]int // request ids read and not yet answered
	idle    chan struct{}  // closed while nothing is pending
	inBuf   []byte         // a line read in part
	outBuf  []byte         // a line written in part
	eof     bool           // in ended; the next Read says so
}

func newDrain(ctx context.Context, in io.Reader, out io.Writer) *drain {
	d := &drain{ctx: ctx, in: in, out: out, pending: map[string]int{}, idle: make(chan struct{})}
	close(d.idle)
	return d
}

// rpcMessage is what drain reads of a JSON-RPC message.
type rpcMessage struct {
	ID     json.RawMessage `json:"id"`
	Method string          `json:"method"`
}

// each calls fn with every message of a complete line (a batch is several).
func each(line []byte, fn func(rpcMessage)) {
	line = bytes.TrimSpace(line)
	if len(line) == 0 {
		return
	}
	if line[0] == '[' {
		var batch []rpcMessage
		if json.Unmarshal(line, &batch) == nil {
			for _, m := range batch {
				fn(m)
			}
		}
		return
	}
	var m rpcMessage
	if json.Unmarshal(line, &m) == nil {
		fn(m)
	}
}

// idOf is a message's id in one spelling (1 and 1.0 are the same id), or ""
// for a notification.
func idOf(raw json.RawMessage) string {
	var v any
	if len(raw) == 0 || json.Unmarshal(raw, &v) != nil || v == nil {
		return ""
	}
	b, _ := json.Marshal(v)
	return string(b)
}

// lines appends p to *buf and calls fn with every complete line.
func lines(buf *[]byte, p []byte, fn func([]byte)) {
	*buf = append(*buf, p...)
	for {
		i := bytes.IndexByte(*buf, '\n')
		if i < 0 {
			return
		}
		fn((*buf)[:i])
		*buf = (*buf)[i+1:]
	}
}

func (d *drain) Read(p []byte) (int, error) {
	if d.eof {
		// Every request read is the server's now: wait for its answers
		// (or for the end of the context), then let the server end.
		d.mu.Lock()
		idle := d.idle
		d.mu.Unlock()
		select {
		case <-idle:
		case <-d.ctx.Done():
		}
		return 0, io.EOF
	}
	n, err := d.in.Read(p)
	// Only Read touches inBuf (the transport reads from one goroutine).
	lines(&d.inBuf, p[:n], d.countLine)
	if err == io.EOF {
		// A last line without a newline is a request too.
		if len(bytes.TrimSpace(d.inBuf)) > 0 {
			d.countLine(d.inBuf)
		}
		d.inBuf = nil
		d.eof = true
		if n > 0 {
			return n, nil // the bytes first; EOF on the next Read
		}
		return d.Read(p)
	}
	return n, err
}

// countLine counts the requests of one complete line read.
func (d *drain) countLine(l []byte) {
	d.mu.Lock()
	defer d.mu.Unlock()
	each(l, func(m rpcMessage) {
		if id := idOf(m.ID); id != "" && m.Method != "" {
			if len(d.pending) == 0 {
				d.idle = make(chan struct{})
			}
			d.pending[id]++
		}
	})
}

func (d *drain) Write(p []byte) (int, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	n, err := d.out.Write(p)
	lines(&d.outBuf, p[:n], func(l []byte) {
		each(l, func(m rpcMessage) {
			// An answer has an id and no method (a request of the
			// server's own has both).
			id := idOf(m.ID)
			if id == "" || m.Method != "" || d.pending[id] == 0 {
				return
			}
			if d.pending[id]--; d.pending[id] == 0 {
				delete(d.pending, id)
			}
			if len(d.pending) == 0 {
				close(d.idle)
			}
		})
	})
	return n, err
}
