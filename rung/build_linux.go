package rung

import (
	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/rung/gvisor"
	"github.com/dryexec/dryexec/rung/linuxns"
	"github.com/dryexec/dryexec/rung/vm"
)

func build(name string) dryexec.Rung {
	switch name {
	case "ns":
		return &linuxns.Rung{}
	case "gvisor":
		return &gvisor.Rung{}
	case "vm":
		return &vm.Rung{}
	}
	return nil
}
