//go:build !linux

package rung

import (
	"os"

	"github.com/dryexec/dryexec"
)

// Covered lists what every sandbox's view covers of the host: the default
// credential masks beneath the caller's home, and own (see cover_linux.go).
func Covered(own []string) ([]string, error) {
	var homes []string
	if h, err := os.UserHomeDir(); err == nil {
		homes = append(homes, h)
	}
	masks, err := dryexec.MaskPaths(homes, nil, false)
	if err != nil {
		return nil, err
	}
	return append(masks, own...), nil
}
