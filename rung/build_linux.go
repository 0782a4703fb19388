package rung

import (
	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/rung/gvisor"
	"github.com/dryexec/dryexec/rung/host"
	"github.com/dryexec/dryexec/rung/linuxns"
	"github.com/dryexec/dryexec/rung/seatbelt"
	"github.com/dryexec/dryexec/rung/vm"
)

// build is the registry: one line per rung this build has.
func build(name string, c Config) dryexec.Rung {
	switch name {
	case Host:
		return &host.Rung{GuestExe: c.GuestExe}
	case "ns":
		return &linuxns.Rung{GuestExe: c.GuestExe, Log: c.Log, Cgroups: c.Cgroups}
	case "gvisor":
		return &gvisor.Rung{GuestExe: c.GuestExe, Log: c.Log, Cgroups: c.Cgroups}
	case "vm":
		return &vm.Rung{GuestExe: c.GuestExe, Log: c.Log}
	}
	return nil
}

// notBuilt says why the rung called name is not in this build.
func notBuilt(name string) string {
	if name == seatbelt.Name {
		return seatbelt.NotHere
	}
	return "not implemented in this build yet"
}
