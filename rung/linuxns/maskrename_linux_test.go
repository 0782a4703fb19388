package linuxns

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
)

// TestRenamedDirHoldingMaskLeaksNothing: a dir that holds a mask or dryexec's
// own state, renamed with rename(2) (root: the kernel moves it, mount and
// all; rootless: the supervisor refuses), never brings the host's masked
// contents into the delta — no content, no hash, no blob, no diff — and a
// delta that cannot report what the host had there says it is incomplete.
func TestRenamedDirHoldingMaskLeaksNothing(t *testing.T) {
	requireNS(t)
	const secret = "SECRET-KEY-MATERIAL-0123456789"
	tests := []struct {
		name string
		spec func(dir string) dryexec.TrialSpec
	}{
		{"credential mask", func(dir string) dryexec.TrialSpec {
			return dryexec.TrialSpec{Masks: []string{filepath.Join(dir, "proj/keys")}, NoDefaultMasks: true}
		}},
		{"dryexec's own state", func(dir string) dryexec.TrialSpec {
			return dryexec.TrialSpec{OwnPaths: []string{filepath.Join(dir, "proj/keys")}, NoDefaultMasks: true}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			for p, c := range map[string]string{"proj/keys/id": secret, "proj/keys/sub/token": secret, "proj/src/main.c": "int main;\n"} {
				if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, p)), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(dir, p), []byte(c), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			before := snapshot(t, dir)
			sink := &memSink{}
			spec := tt.spec(dir)
			spec.Blobs = sink
			d := runTrial(t, dir, spec, "/usr/bin/python3", "-c",
				`import os
try:
    os.rename("proj", "proj2")
    print("renamed")
except OSError as e:
    print("refused", e.errno)`)
			b, err := json.Marshal(d)
			if err != nil {
				t.Fatal(err)
			}
			hash := sha256hex([]byte(secret))
			if strings.Contains(string(b), secret) || strings.Contains(string(b), hash) {
				t.Fatalf("the delta holds the masked content or its hash:\n%s", b)
			}
			for sum, blob := range sink.blobs {
				if strings.Contains(string(blob), secret) {
					t.Fatalf("blob %s holds the masked content", sum)
				}
			}
			renamed := strings.HasPrefix(d.Process.Stdout, "renamed")
			if renamed && !d.Incomplete {
				t.Errorf("the dir holding the mask was renamed, yet the delta claims to be complete: %s", b)
			}
			if !renamed && !strings.HasPrefix(d.Process.Stdout, "refused") {
				t.Fatalf("stdout %q stderr %q", d.Process.Stdout, d.Process.Stderr)
			}
			sameSnapshot(t, before, snapshot(t, dir))
			t.Logf("%s (incomplete: %v %s)", strings.TrimSpace(d.Process.Stdout), d.Incomplete, d.IncompleteReason)
		})
	}
}
