package session

import (
	"strings"
	"testing"
)

// TestShellLargeResult: a shell result larger than a frame header (here 2 ×
// 600 kB) comes back instead of hanging the call.
func TestShellLargeResult(t *testing.T) {
	forEachRung(t, func(t *testing.T, open opener) {
		s := open(t, Options{})
		out := sh(t, s, `head -c 600000 /dev/zero | tr '\0' a`)
		if out != strings.Repeat("a", 600000) {
			t.Errorf("stdout of %d bytes", len(out))
		}
	})
}
