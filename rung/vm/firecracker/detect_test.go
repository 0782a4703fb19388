package firecracker

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDetect: Firecracker is chosen only with a binary and a probe VM that
// booted with KVM; without a binary the probe is not even run.
func TestDetect(t *testing.T) {
	bin := shortDir(t)
	fc := filepath.Join(bin, "firecracker")
	if err := os.WriteFile(fc, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	other := filepath.Join(bin, "fc-other")
	if err := os.WriteFile(other, []byte("#!/bin/sh\nexit 0\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	empty := shortDir(t)
	hang := errors.New("no hello from the VM's init within 5s")
	for _, tc := range []struct {
		name     string
		path     string // $PATH
		env      string // $DRYEXEC_FIRECRACKER
		binary   string
		probeErr error
		use      bool
		found    string
		probed   bool
		why      string
	}{
		{name: "no binary", path: empty, why: "no firecracker binary"},
		{name: "binary on PATH, KVM boots", path: bin, use: true, found: fc, probed: true, why: "a probe VM booted with KVM"},
		{name: "binary on PATH, KVM hangs", path: bin, probeErr: hang, found: fc, probed: true, why: "KVM does not boot a VM: no hello"},
		{name: "binary from the environment", path: empty, env: other, use: true, found: other, probed: true},
		{name: "binary given", path: empty, binary: other, use: true, found: other, probed: true},
		{name: "binary given but missing", path: bin, binary: filepath.Join(empty, "firecracker"), why: "no firecracker binary"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("PATH", tc.path)
			t.Setenv(BinaryEnv, tc.env)
			probed := false
			d := Detect(context.Background(), tc.binary, func(context.Context) error {
				probed = true
				return tc.probeErr
			})
			if d.Use != tc.use || d.Binary != tc.found || probed != tc.probed || !strings.Contains(d.Why, tc.why) {
				t.Errorf("Detect = %+v (probed %v); want use %v, binary %q, probed %v, why ~ %q", d, probed, tc.use, tc.found, tc.probed, tc.why)
			}
		})
	}
}
