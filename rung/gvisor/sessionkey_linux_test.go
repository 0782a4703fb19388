package gvisor

import (
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/rung/linuxns"
)

// TestSandboxKey: a gvisor session's sandbox is built from the host's
// mount plan and masks as an ns one is, so a pooled one goes stale as
// ns's does: the key is ns's, and another mask makes another key.
func TestSandboxKey(t *testing.T) {
	mask := t.TempDir()
	tests := []struct {
		name string
		spec dryexec.SandboxSpec
	}{
		{"default", dryexec.SandboxSpec{}},
		{"a mask", dryexec.SandboxSpec{Masks: []string{mask}}},
	}
	keys := map[string]string{}
	for _, tc := range tests {
		got, err := (&Rung{}).SandboxKey(tc.spec)
		if err != nil {
			t.Fatal(err)
		}
		want, err := (&linuxns.Rung{}).SandboxKey(tc.spec)
		if err != nil || got != want {
			t.Errorf("%s: key %q, ns's %q (%v)", tc.name, got, want, err)
		}
		keys[tc.name] = got
	}
	if keys["default"] == keys["a mask"] {
		t.Error("a mask does not change the key")
	}
}
