//go:build !linux

package netsim

import (
	"context"
	"errors"
	"os"
)

// ServeTUN is Linux-only; other rungs use Serve with their own packet link.
func (s *Sim) ServeTUN(ctx context.Context, tun *os.File) error {
	tun.Close()
	return errors.New("netsim: TUN devices need Linux")
}
