//go:build !linux

package guestexe

import "os"

// Self names the running binary (there is no /proc/self/exe to survive its
// replacement by).
func Self() string {
	p, err := os.Executable()
	if err != nil {
		return os.Args[0]
	}
	return p
}
