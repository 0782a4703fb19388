//go:build !linux

package tun

import (
	"errors"
	"net"
	"os"
)

// errNoTUN: TUN devices and namespaces are Linux-only; other rungs use
// netsim.Serve with their own packet link.
var errNoTUN = errors.New("tun: TUN devices need Linux")

// CheckTUN is Linux-only.
func CheckTUN() error { return errNoTUN }

// SetupTUN is Linux-only.
func SetupTUN(name string) (*os.File, error) { return nil, errNoTUN }

// SetPersist is Linux-only.
func SetPersist(dev *os.File, on bool) error { return errNoTUN }

// SendFD is Linux-only.
func SendFD(c *net.UnixConn, f *os.File) error { return errNoTUN }

// RecvFD is Linux-only.
func RecvFD(c *net.UnixConn) (*os.File, error) { return nil, errNoTUN }
