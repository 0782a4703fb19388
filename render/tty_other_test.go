//go:build !linux

package render

import (
	"os"
	"testing"
)

// openTTY returns nil: the tests that need a terminal are skipped off Linux.
func openTTY(t *testing.T) *os.File { return nil }
