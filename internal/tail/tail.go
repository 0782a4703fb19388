// Package tail owns bounded output capture: a writer that keeps the last N bytes
// written to it, so that a chatty process costs bounded memory and the user still
// sees how it ended.
package tail

import (
	"io"
	"sync"
)

// Buffer keeps the last cap bytes written to it. It is safe for concurrent use.
type Buffer struct {
	mu        sync.Mutex // guards the fields below; the reader goroutine writes
	buf       []byte     // ring of len cap once full
	cap       int
	start     int // index of the oldest byte once full
	full      bool
	truncated bool
}

// New returns a Buffer that keeps the last cap bytes.
func New(cap int) *Buffer { return &Buffer{cap: cap} }

// Write keeps the tail of everything written; it never fails.
func (t *Buffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if len(p) >= t.cap {
		t.truncated = t.truncated || len(p) > t.cap || len(t.buf) > 0
		t.buf = append(t.buf[:0], p[len(p)-t.cap:]...)
		t.start, t.full = 0, true
		return n, nil
	}
	if !t.full {
		if room := t.cap - len(t.buf); len(p) <= room {
			t.buf = append(t.buf, p...)
			return n, nil
		}
		room := t.cap - len(t.buf)
		t.buf = append(t.buf, p[:room]...)
		p = p[room:]
		t.full = true
	}
	t.truncated = true
	for len(p) > 0 {
		c := copy(t.buf[t.start:], p)
		p = p[c:]
		t.start = (t.start + c) % t.cap
	}
	return n, nil
}

// Bytes returns the kept bytes in order and whether earlier ones were dropped.
func (t *Buffer) Bytes() ([]byte, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]byte, 0, len(t.buf))
	out = append(out, t.buf[t.start:]...)
	out = append(out, t.buf[:t.start]...)
	return out, t.truncated
}

// Tee returns a writer to t that also passes everything to live (a caller
// streaming a command's output), ignoring live's errors: a caller that stops
// reading must not cut the kept tail short. A nil live is t alone.
func (t *Buffer) Tee(live io.Writer) io.Writer {
	if live == nil {
		return t
	}
	return tee{t, live}
}

type tee struct {
	buf  *Buffer
	live io.Writer
}

func (l tee) Write(p []byte) (int, error) {
	l.live.Write(p)
	return l.buf.Write(p)
}
