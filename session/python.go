package session

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/wire"
)

// Limits on events the sandbox sends: the host keeps them all in memory.
const (
	MaxEmits     = 100_000
	MaxEmitBytes = 64 << 20
)

// JSON is a codec value for anything encoding/json can marshal.
func JSON(v any) wire.Value { return wire.Value{Type: "json", JSON: v} }

// Bytes is a codec value for raw bytes (Python bytes).
func Bytes(b []byte) wire.Value {
	if b == nil {
		b = []byte{}
	}
	return wire.Value{Type: "bytes", Bytes: b}
}

// File is a codec value for a path (Python pathlib.Path); a relative path is
// relative to the workspace.
func File(path string) wire.Value { return wire.Value{Type: "file", Path: path} }

// Python runs code in the sandbox's Python (a fresh interpreter per call, in
// the shell's cwd and environment). inputs are bound as globals; the result
// holds the transcript, print entries, harvested outputs and any error. A
// failure of the code is a result with OK false, not an error; an error means
// the exec could not be run or its answer was lost. timeout 0 means none; a
// timeout kills the runner, not the session. The cache's pending writes are
// applied only if the result is OK.
//
// The interpreter is usually started before the call (after the previous one,
// see docs/architecture.md "Sessions"), but it is still a fresh one: nothing
// carries over from one call to the next.
func (s *Session) Python(ctx context.Context, code string, inputs map[string]wire.Value, timeout time.Duration) (*wire.PythonResult, error) {
	return s.PythonWith(ctx, code, inputs, PythonOptions{Timeout: timeout})
}

// PythonOptions are Python's less common settings.
type PythonOptions struct {
	// Timeout bounds the exec (0: none).
	Timeout time.Duration
	// Fresh starts this call's interpreter only when the call comes (a
	// pre-started one is killed), and pre-starts none for the next call: the
	// old, slower behaviour, kept to measure the difference.
	Fresh bool
	// CacheReadOnly refuses this exec's cache writes and deletes (as
	// Options.CacheReadOnly does for the whole session).
	CacheReadOnly bool
	// Caps are this exec's output caps over the session's defaults
	// (wire.Caps); nil keeps the defaults.
	Caps *wire.Caps
}

// PythonWith is Python with options.
func (s *Session) PythonWith(ctx context.Context, code string, inputs map[string]wire.Value, opt PythonOptions) (*wire.PythonResult, error) {
	for name, v := range inputs {
		if err := wire.CheckValue(&v); err != nil {
			return nil, fmt.Errorf("session: input %q: %w", name, err)
		}
	}
	if err := checkCaps(opt.Caps); err != nil {
		return nil, err
	}
	body, bin, err := wire.EncodeBody(&wire.ExecPython{Code: code, Inputs: inputs, TimeoutMS: opt.Timeout.Milliseconds(), Fresh: opt.Fresh,
		HostObjects: s.hostGlobalNames(), Caps: opt.Caps})
	if err != nil {
		return nil, fmt.Errorf("session: exec_python request: %w", err)
	}
	s.pyMu.Lock()
	defer s.pyMu.Unlock()
	if s.pyAbandoned {
		// The last exec's caller gave up waiting, but the guest may still be
		// running it. The guest serves requests one at a time, so its answer
		// to a ping means that exec is over; only then may this exec's cache
		// writes be collected (the old one's would land in them otherwise).
		if _, err := s.Ping(ctx); err != nil {
			return nil, err
		}
		s.pyAbandoned = false
	}
	s.cache.begin(opt.CacheReadOnly)
	mark := s.netMark()
	f, err := s.call(ctx, wire.VerbExecPython, body, bin...)
	if err != nil {
		s.cache.end(false)
		if ctx.Err() != nil && !errors.Is(err, dryexec.ErrSessionLost) {
			s.pyAbandoned = true
		}
		return nil, err
	}
	var r wire.PythonResult
	if err := wire.DecodeBody(f, &r, false); err != nil {
		s.cache.end(false)
		return nil, fmt.Errorf("%w: exec_python result: %v", dryexec.ErrGuest, err)
	}
	if r.Outputs == nil {
		r.Outputs = map[string]wire.Value{}
	}
	if r.OutputsSkipped == nil {
		r.OutputsSkipped = map[string]string{}
	}
	if r.Prints == nil {
		r.Prints = []wire.PrintEntry{}
	}
	s.takeOOMKills(&r.OOMKills)
	// The log is the host's: nothing the guest wrote here is kept.
	r.Network = s.netSince(ctx, mark)
	s.cache.end(r.OK)
	return &r, nil
}

// Cache is the session's cache (see Cache).
func (s *Session) Cache() *Cache { return s.cache }

// Emits returns the events the sandbox emitted so far, in order, also those of
// execs that later failed.
func (s *Session) Emits() []wire.Emit {
	s.emitMu.Lock()
	defer s.emitMu.Unlock()
	return slices.Clone(s.emits)
}

func (s *Session) serveEmit(f *wire.Frame) (any, [][]byte, error) {
	var e wire.Emit
	if err := wire.DecodeBody(f, &e, false); err != nil {
		return nil, nil, err
	}
	if err := wire.CheckValue(&e.Value); err != nil {
		return nil, nil, remoteErr("type", "emit %q: %v", e.Name, err)
	}
	if len(e.Name) > 4096 {
		return nil, nil, remoteErr("value", "an event name of %d bytes (max 4096)", len(e.Name))
	}
	size := len(f.Body)
	for _, b := range f.Bin {
		size += len(b)
	}
	// emitMu is held across OnEmit, so that the callback sees events one at a
	// time and in order.
	s.emitMu.Lock()
	defer s.emitMu.Unlock()
	if len(s.emits) >= MaxEmits || s.emitBytes+size > MaxEmitBytes {
		return nil, nil, remoteErr("limit", "this session already holds %d events (%d bytes); the limits are %d and %d", len(s.emits), s.emitBytes, MaxEmits, MaxEmitBytes)
	}
	s.emits = append(s.emits, e)
	s.emitBytes += size
	if s.onEmit != nil {
		s.onEmit(e)
	}
	return nil, nil, nil
}

func remoteErr(code, format string, a ...any) error {
	return &wire.RemoteError{Code: code, Message: fmt.Sprintf(format, a...)}
}
