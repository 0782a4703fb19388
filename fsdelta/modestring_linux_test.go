package fsdelta

import (
	"fmt"
	"testing"
)

// TestModeString: the table made at init gives every mode's four octal
// digits, as fmt does, and only the permission bits count.
func TestModeString(t *testing.T) {
	for m := uint32(0); m <= 07777; m++ {
		if got, want := modeString(m), fmt.Sprintf("%04o", m); got != want {
			t.Fatalf("modeString(%o) = %q, want %q", m, got, want)
		}
	}
	if got := modeString(0o100644); got != "0644" {
		t.Fatalf("modeString(0100644) = %q, want 0644", got)
	}
}
