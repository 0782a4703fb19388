//go:build !linux

package rung

import (
	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/rung/host"
)

// build is the registry: one line per rung this build has (sessions on the
// host rung only, outside Linux).
func build(name string, c Config) dryexec.Rung {
	switch name {
	case Host:
		return &host.Rung{GuestExe: c.GuestExe}
	}
	return nil
}
