package rung

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/rung/host"
)

// TestBestNeverPicksHost: "best" is the strongest rung that isolates; a
// build where only the host rung is available has no best, and says so,
// while host by name is there.
func TestBestNeverPicksHost(t *testing.T) {
	onlyHost := func(name string, c Config) dryexec.Rung {
		if name == Host {
			return &host.Rung{}
		}
		return nil
	}
	ctx := context.Background()
	r, err := open(ctx, "best", Config{}, onlyHost)
	var iu *dryexec.IsolationUnavailableError
	if !errors.As(err, &iu) {
		t.Fatalf("best with only host: %v, %v; want an IsolationUnavailableError", r, err)
	}
	if r, err := open(ctx, Host, Config{}, onlyHost); err != nil || r.Name() != Host {
		t.Fatalf("host by name: %v, %v", r, err)
	}
	if r, err := Select(ctx, "best"); err == nil && r.Name() == Host {
		t.Fatal("best picked host")
	}
}

// TestDoctorSaysNoIsolation: doctor lists host as available and says, in
// its notes, that it does not isolate.
func TestDoctorSaysNoIsolation(t *testing.T) {
	for _, s := range Doctor(context.Background()) {
		if s.Name != Host {
			continue
		}
		if !s.Available || len(s.Notes) == 0 || !strings.HasPrefix(s.Notes[0], "no isolation") {
			t.Fatalf("host: %+v", s)
		}
		return
	}
	t.Fatal("doctor does not list host")
}

// TestSeatbeltSaysWhy: on this (non-macOS) host, asking for seatbelt is an
// IsolationUnavailableError that says it is macOS's sandbox, doctor says
// the same, and the rungs offered to clients do not include it.
func TestSeatbeltSaysWhy(t *testing.T) {
	_, err := Select(context.Background(), "seatbelt")
	var iu *dryexec.IsolationUnavailableError
	if !errors.As(err, &iu) || iu.Rung != "seatbelt" || !strings.Contains(iu.Missing, "macOS") {
		t.Fatalf("seatbelt: %v; want an IsolationUnavailableError saying it needs macOS", err)
	}
	for _, s := range Doctor(context.Background()) {
		if s.Name == "seatbelt" && (s.Available || s.Missing != iu.Missing) {
			t.Errorf("doctor: %+v, want unavailable: %s", s, iu.Missing)
		}
	}
	for _, n := range Built() {
		if n == "seatbelt" {
			t.Error("Built lists seatbelt on a host that cannot run it")
		}
	}
}
