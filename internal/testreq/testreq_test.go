package testreq

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestRequired(t *testing.T) {
	tests := []struct {
		sw   string
		c    Cap
		want bool
	}{
		{"", NS, false},
		{"all", Kernel, true},
		{"1", GVisor, true},
		{"ns,rootless", NS, true},
		{"ns, rootless", Rootless, true},
		{"ns,rootless", GVisor, false},
		{"nss", NS, false},
	}
	for _, tt := range tests {
		if got := required(tt.sw, tt.c); got != tt.want {
			t.Errorf("required(%q, %s) = %v, want %v", tt.sw, tt.c, got, tt.want)
		}
	}
}

// TestGateChild is what TestGate runs in a child: one capability that is
// there, one that is not.
func TestGateChild(t *testing.T) {
	if os.Getenv("TESTREQ_CHILD") == "" {
		t.Skip("run by TestGate")
	}
	t.Run("have", func(t *testing.T) { Need(t, NS, nil) })
	t.Run("lack", func(t *testing.T) { Needf(t, GVisor, "runsc", errors.New("no runsc\non PATH")) })
}

// TestGate runs a test binary that needs a missing capability with and
// without the switch: skipped without it, failed with it, and the log and its
// summary say so.
func TestGate(t *testing.T) {
	tests := []struct {
		sw       string
		wantFail bool
		want     Count
	}{
		{"", false, Count{Cap: GVisor, Skipped: 1}},
		{"ns", false, Count{Cap: GVisor, Skipped: 1}},
		{"gvisor", true, Count{Cap: GVisor, Failed: 1}},
		{"all", true, Count{Cap: GVisor, Failed: 1}},
	}
	for _, tt := range tests {
		t.Run("switch="+tt.sw, func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "log")
			cmd := exec.Command(os.Args[0], "-test.run", "^TestGateChild$", "-test.v")
			cmd.Env = append(os.Environ(), "TESTREQ_CHILD=1", Env+"="+tt.sw, LogEnv+"="+log)
			out, err := cmd.CombinedOutput()
			if failed := err != nil; failed != tt.wantFail {
				t.Fatalf("child failed=%v, want %v:\n%s", failed, tt.wantFail, out)
			}
			if tt.wantFail && !strings.Contains(string(out), "gvisor (runsc) is required here") {
				t.Errorf("the failure does not say what was required:\n%s", out)
			}
			f, err := os.Open(log)
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			counts, err := Summarize(f)
			if err != nil {
				t.Fatal(err)
			}
			if len(counts) != 2 || counts[0].Cap != NS || counts[0].Ran != 1 {
				t.Fatalf("counts = %+v, want ns ran once first", counts)
			}
			g := counts[1]
			if g.Cap != tt.want.Cap || g.Ran != 0 || g.Skipped != tt.want.Skipped || g.Failed != tt.want.Failed {
				t.Errorf("gvisor counts = %+v, want %+v", g, tt.want)
			}
			if tt.want.Skipped == 1 && (len(g.SkippedTests) != 1 ||
				g.SkippedTests[0] != "internal/testreq TestGateChild/lack: runsc no runsc on PATH") {
				t.Errorf("skipped tests = %q", g.SkippedTests)
			}
		})
	}
}

func TestSummarizeBadLine(t *testing.T) {
	if _, err := Summarize(strings.NewReader("ns\tran\n")); !errors.Is(err, ErrBadLog) {
		t.Fatalf("err = %v, want ErrBadLog", err)
	}
}
