package guest

import (
	"os"
	"path/filepath"
	"testing"
)

// TestWriteNetFile: the trust bundle the guest makes is the host's roots,
// a newline if they lack one, and netsim's CA, as netsim's CA.Bundle
// makes it on the host; missing or empty roots leave the CA alone.
func TestWriteNetFile(t *testing.T) {
	const ca = "-----BEGIN CERTIFICATE-----\nCA\n-----END CERTIFICATE-----\n"
	for _, tc := range []struct {
		name   string
		system *string // nil: no such file
		want   string
	}{
		{"roots ending in a newline", ptr("ROOT1\nROOT2\n"), "ROOT1\nROOT2\n" + ca},
		{"roots without a final newline", ptr("ROOT1\nROOT2"), "ROOT1\nROOT2\n" + ca},
		{"empty roots", ptr(""), ca},
		{"no roots", nil, ca},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			system := filepath.Join(dir, "roots.crt")
			if tc.system != nil {
				if err := os.WriteFile(system, []byte(*tc.system), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			out := filepath.Join(dir, "bundle")
			if err := writeNetFile(out, system, []byte(ca)); err != nil {
				t.Fatal(err)
			}
			got, err := os.ReadFile(out)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("bundle %q, want %q", got, tc.want)
			}
			if fi, err := os.Stat(out); err != nil || fi.Mode().Perm() != 0o444 {
				t.Fatalf("bundle mode %v (%v), want 0444", fi.Mode(), err)
			}
		})
	}
}

func ptr(s string) *string { return &s }
