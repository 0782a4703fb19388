//go:build !linux

package rung

import (
	"runtime"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/rung/host"
	"github.com/dryexec/dryexec/rung/seatbelt"
)

// build is the registry: one line per rung this build has (sessions on the
// host rung only, outside Linux; seatbelt on macOS, which says itself what
// it lacks there).
func build(name string, c Config) dryexec.Rung {
	switch {
	case name == Host:
		return &host.Rung{GuestExe: c.GuestExe}
	case name == seatbelt.Name && runtime.GOOS == "darwin":
		return &seatbelt.Rung{GuestExe: c.GuestExe, Log: c.Log}
	}
	return nil
}

// notBuilt says why the rung called name is not in this build.
func notBuilt(string) string { return "not implemented in this build for " + runtime.GOOS }
