package render

import (
	"io"
	"sync"
	"unicode/utf8"
)

// LiveWriter passes a running command's output on to w as it comes
// (dryexec run's live output). For a terminal (escape) it is made harmless
// on the way, as everything from a sandbox is: control characters and
// sequences, C1 controls, bidi overrides and bytes that are not UTF-8 are
// shown escaped (clean), tabs and newlines kept, and a carriage return
// becomes a newline — a lone CR would let the output overwrite what is on
// the line, and progress bars still read as a line per update. A rune cut
// between two writes is held until its end arrives (or Flush). Without
// escape the bytes go through as they are (a file or a pipe gets what the
// command wrote).
type LiveWriter struct {
	mu      *sync.Mutex // shared by a pair (NewLiveWriterPair)
	w       io.Writer
	escape  bool
	pending []byte // the start of a rune cut by the last write
	afterCR bool   // the last byte was a CR, already written as a newline
	err     error
}

// NewLiveWriter returns a LiveWriter to w.
func NewLiveWriter(w io.Writer, escape bool) *LiveWriter {
	return &LiveWriter{mu: new(sync.Mutex), w: w, escape: escape}
}

// NewLiveWriterPair returns LiveWriters for a command's stdout (to outW) and
// stderr (to errW) that write one at a time: the two streams are copied by
// two goroutines, and often end up in one writer (run --json sends both to
// stderr), which need not be safe for concurrent writes.
func NewLiveWriterPair(outW io.Writer, escapeOut bool, errW io.Writer, escapeErr bool) (stdout, stderr *LiveWriter) {
	mu := new(sync.Mutex)
	return &LiveWriter{mu: mu, w: outW, escape: escapeOut}, &LiveWriter{mu: mu, w: errW, escape: escapeErr}
}

// Write passes p on. Its error is the first write error to w, after which
// nothing more is written; the command is never held up by it.
func (l *LiveWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.err != nil {
		return len(p), nil
	}
	if !l.escape {
		_, l.err = l.w.Write(p)
		return len(p), nil
	}
	buf := append(l.pending, p...)
	l.pending = nil
	// Hold back an incomplete rune at the end.
	if k := incompleteTail(buf); k > 0 {
		l.pending = append([]byte(nil), buf[len(buf)-k:]...)
		buf = buf[:len(buf)-k]
	}
	l.writeClean(buf)
	return len(p), nil
}

// Flush writes what is held of a cut rune (escaped: it never completed).
func (l *LiveWriter) Flush() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.pending) > 0 && l.err == nil {
		p := l.pending
		l.pending = nil
		l.writeClean(p)
	}
	return l.err
}

func (l *LiveWriter) writeClean(buf []byte) {
	out := make([]byte, 0, len(buf)+16)
	start := 0
	for i := 0; i < len(buf); i++ {
		switch buf[i] {
		case '\r':
			out = append(out, clean(string(buf[start:i]), true, true)...)
			out = append(out, '\n')
			start = i + 1
			l.afterCR = true
			continue
		case '\n':
			out = append(out, clean(string(buf[start:i]), true, true)...)
			if !l.afterCR { // CR LF: the CR wrote the newline
				out = append(out, '\n')
			}
			start = i + 1
		}
		l.afterCR = false
	}
	out = append(out, clean(string(buf[start:]), true, true)...)
	if len(out) > 0 && l.err == nil {
		_, l.err = l.w.Write(out)
	}
}

// incompleteTail is how many bytes at the end of b start a UTF-8 rune that
// is not complete (0 if none).
func incompleteTail(b []byte) int {
	for k := 1; k <= 3 && k <= len(b); k++ {
		c := b[len(b)-k]
		if c < 0x80 {
			return 0
		}
		if c >= 0xc0 { // a leading byte: is its rune complete?
			need := 2
			switch {
			case c >= 0xf0:
				need = 4
			case c >= 0xe0:
				need = 3
			}
			if k < need && !utf8.FullRune(b[len(b)-k:]) {
				return k
			}
			return 0
		}
	}
	return 0
}
