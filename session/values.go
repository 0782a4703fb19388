package session

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/dryexec/dryexec/wire"
)

// Hard ceilings of wire.Caps: a larger cap is lowered to these (the host
// keeps every exec's output in memory).
const (
	MaxCapEntry = 1 << 20
	MaxCapTotal = 64 << 20
)

// ShellOptions are a shell exec's settings.
type ShellOptions struct {
	// Timeout bounds the exec (0: none).
	Timeout time.Duration
	// Caps are this exec's output caps over Options.OutputCap (only Total
	// applies to a shell exec: its transcript and each stream).
	Caps *wire.Caps
}

// ShellWith is Shell with options.
func (s *Session) ShellWith(ctx context.Context, command string, opt ShellOptions) (*wire.ShellResult, error) {
	if err := checkCaps(opt.Caps); err != nil {
		return nil, err
	}
	mark := s.netMark()
	f, err := s.call(ctx, wire.VerbExecShell, &wire.ExecShell{Command: command, TimeoutMS: opt.Timeout.Milliseconds(), Caps: opt.Caps})
	if err != nil {
		return nil, err
	}
	var r wire.ShellResult
	err = wire.DecodeBody(f, &r, false)
	s.takeOOMKills(&r.OOMKills)
	// The log is the host's: nothing the guest wrote here is kept.
	r.Network = s.netSince(ctx, mark)
	if e := s.networkEnded(); e != "" {
		r.Warnings = append(r.Warnings, e)
	}
	return &r, err
}

// ErrCaps: a cap is negative.
var ErrCaps = fmt.Errorf("session: caps are 0 (the default) or positive")

func checkCaps(c *wire.Caps) error {
	if c != nil && (c.Entry < 0 || c.Total < 0) {
		return fmt.Errorf("%w (entry %d, total %d)", ErrCaps, c.Entry, c.Total)
	}
	return nil
}

// configure applies the options a session gets when it is handed to its
// caller (pooled or not): the initial cache and whether host objects are
// also globals.
func (s *Session) configure(opt Options) error {
	var size int64
	for k, it := range opt.Cache {
		if k == "" || len(k) > wire.MaxCacheKey {
			return fmt.Errorf("session: cache key %q: 1 to %d bytes", k, wire.MaxCacheKey)
		}
		if len(it.Value) > wire.MaxCacheValue {
			return fmt.Errorf("session: cache value %q of %d bytes (max %d)", k, len(it.Value), wire.MaxCacheValue)
		}
		if err := checkCacheKind(it.Kind); err != nil {
			return fmt.Errorf("session: cache value %q: %w", k, err)
		}
		size += int64(len(it.Value))
	}
	if size > MaxCacheBytes || len(opt.Cache) > MaxCacheEntries {
		return fmt.Errorf("session: an initial cache of %d bytes in %d keys (max %d, %d)", size, len(opt.Cache), MaxCacheBytes, MaxCacheEntries)
	}
	for k, it := range opt.Cache {
		_ = s.cache.SetEntry(k, it) // checked above
	}
	s.bindMu.Lock()
	s.hostGlobals = !opt.NoHostGlobals
	s.bindMu.Unlock()
	return nil
}

// hostGlobalNames are the host objects the runner binds as globals of their
// own name (besides host.NAME): none when Options.NoHostGlobals.
func (s *Session) hostGlobalNames() []string {
	s.bindMu.Lock()
	defer s.bindMu.Unlock()
	if !s.hostGlobals {
		return nil
	}
	out := make([]string, 0, len(s.hostObjects))
	for name := range s.hostObjects {
		out = append(out, name)
	}
	slices.Sort(out)
	return out
}
