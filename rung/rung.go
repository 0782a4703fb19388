// Package rung owns the ladder: which isolation rungs exist, which of them this
// host can run, and choosing one by name ("best" is the strongest available).
package rung

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/cgroup"
)

// Host is the rung that does not isolate: a scratch copy of the working
// directory, and nothing else between the command and the host.
const Host = "host"

// Ladder lists every rung name of the contract, weakest first.
var ladder = []string{Host, "ns", "gvisor", "vm", "seatbelt"}

// Names returns the rung names of the contract, weakest first.
func Names() []string { return append([]string(nil), ladder...) }

// Status is what doctor reports for one rung.
type Status struct {
	Name      string `json:"name"`
	Available bool   `json:"available"`
	Missing   string `json:"missing,omitempty"`
	// Notes say how an available rung contains its sandboxes here (e.g. how
	// ns enforces its limits, or why it cannot).
	Notes []string `json:"notes,omitempty"`
}

// Config is how the rungs Open returns are set up; the zero value is every
// rung's default.
type Config struct {
	// GuestExe is the binary started as the guest supervisor; empty means
	// guestexe.Executable().
	GuestExe string
	// Log receives debug records; nil logs nothing.
	Log *slog.Logger
	// Cgroups says where sandboxes' cgroups are made (zero: see package
	// cgroup).
	Cgroups cgroup.Options
}

// Select is Open with the default Config.
func Select(ctx context.Context, name string) (dryexec.Rung, error) {
	return Open(ctx, name, Config{})
}

// Open returns the rung called name on this host, set up by cfg, or an
// error that is an *dryexec.IsolationUnavailableError when the host cannot
// run it. "best" picks the strongest available rung that isolates at all:
// never host. Nothing falls back silently.
//
// What a rung offers beyond one-shot trials its users ask for by type
// assertion: dryexec.SessionRung (sessions), dryexec.Pooler (a warm pool).
func Open(ctx context.Context, name string, cfg Config) (dryexec.Rung, error) {
	return open(ctx, name, cfg, build)
}

// open is Open over the registry build.
func open(ctx context.Context, name string, cfg Config, build func(string, Config) dryexec.Rung) (dryexec.Rung, error) {
	if name == "best" {
		for i := len(ladder) - 1; i >= 0; i-- {
			if ladder[i] == Host {
				// No isolation: chosen by name only, never as the strongest.
				continue
			}
			r := build(ladder[i], cfg)
			if r != nil && r.Available(ctx) == nil {
				return r, nil
			}
		}
		return nil, &dryexec.IsolationUnavailableError{Rung: "best", Missing: "no rung is available on this host"}
	}
	known := false
	for _, n := range ladder {
		known = known || n == name
	}
	if !known {
		return nil, fmt.Errorf("unknown rung %q (want one of %v or best)", name, ladder)
	}
	r := build(name, cfg)
	if r == nil {
		return nil, &dryexec.IsolationUnavailableError{Rung: name, Missing: notBuilt(name)}
	}
	if err := r.Available(ctx); err != nil {
		return nil, err
	}
	return r, nil
}

// Doctor reports every rung's availability.
func Doctor(ctx context.Context) []Status {
	var out []Status
	for _, n := range ladder {
		s := Status{Name: n}
		r := build(n, Config{})
		switch {
		case r == nil:
			s.Missing = notBuilt(n)
		default:
			if err := r.Available(ctx); err != nil {
				s.Missing = err.Error()
			} else {
				s.Available = true
				if nr, ok := r.(interface{ Notes() []string }); ok {
					s.Notes = nr.Notes()
				} else {
					s.Notes = notes(n)
				}
			}
		}
		out = append(out, s)
	}
	return out
}
