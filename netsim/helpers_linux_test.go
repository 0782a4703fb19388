package netsim_test

import (
	"fmt"
	"net/netip"
)

type netipAddr = netip.Addr

func errNoName(host string) error { return fmt.Errorf("test resolver: no such host %q", host) }
