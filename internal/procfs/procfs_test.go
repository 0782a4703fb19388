package procfs

import (
	"os"
	"testing"

	"github.com/dryexec/dryexec/internal/testreq"
)

func TestField(t *testing.T) {
	const rollup = "55f0-7ffe ---p 00000000 00:00 0 [rollup]\nRss:                1234 kB\nPss:                 567 kB\nPss_Dirty:            89 kB\nSwapPss:               7 kB\nPrivate_Dirty:        42 kB"
	tests := []struct {
		key  string
		want int64
		ok   bool
	}{
		{"Rss:", 1234, true},
		{"Pss:", 567, true}, // not Pss_Dirty, not SwapPss
		{"Pss_Dirty:", 89, true},
		{"SwapPss:", 7, true},
		{"Private_Dirty:", 42, true}, // the last line, no newline
		{"Dirty:", 0, false},         // only at the start of a line
		{"Swap:", 0, false},
	}
	for _, tt := range tests {
		if got, ok := Field([]byte(rollup), tt.key); got != tt.want || ok != tt.ok {
			t.Errorf("Field(%q) = %d, %v; want %d, %v", tt.key, got, ok, tt.want, tt.ok)
		}
	}
	if _, ok := Field([]byte("Tgid:\n"), "Tgid:"); ok {
		t.Error("a key without a value was read")
	}
	// cgroup counter files: "key value", the key a whole word.
	const oom = "oom_kill_disable 1\nunder_oom 0\noom_kill 3\n"
	for _, tt := range []struct {
		b, key string
		want   int64
		ok     bool
	}{
		{oom, "oom_kill", 3, true}, // not oom_kill_disable
		{oom, "oom_kill_disable", 1, true},
		{oom, "oom", 0, false},
		{"max\t12\n", "max", 12, true},
		{"max 12 extra\n", "max", 12, true},
		{"max x\n", "max", 0, false},
	} {
		if got, ok := Field([]byte(tt.b), tt.key); got != tt.want || ok != tt.ok {
			t.Errorf("Field(%q, %q) = %d, %v; want %d, %v", tt.b, tt.key, got, ok, tt.want, tt.ok)
		}
	}
	if n := testing.AllocsPerRun(100, func() { Field([]byte(oom), "oom_kill") }); n != 0 {
		t.Errorf("Field allocates %v times per call", n)
	}
}

// TestRollup reads this process's own figures: real, not zero.
func TestRollup(t *testing.T) {
	_, err := os.Stat("/proc/self/smaps_rollup")
	testreq.Needf(t, testreq.Kernel, "smaps_rollup", err)
	rss, pss := Rollup(os.Getpid())
	if rss <= 0 || pss <= 0 || pss > rss {
		t.Fatalf("Rollup(self) = rss %d, pss %d", rss, pss)
	}
	if rss, pss := Rollup(-1); rss != 0 || pss != 0 {
		t.Fatalf("Rollup of no process = %d, %d", rss, pss)
	}
}
