package linuxns

import (
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
)

// TestMemoryDelta: a process that writes 64 MiB of private memory and exits
// with it still mapped shows about 64 MiB written (its interpreter's own pages
// on top); a trial that writes next to nothing shows little; the method is
// named; signals and exit codes of traced processes are what they would be
// untraced.
func TestMemoryDelta(t *testing.T) {
	requireNS(t)
	dir := t.TempDir()
	const mib = 1 << 20
	tests := []struct {
		name     string
		argv     []string
		min, max int64
		exit     int
	}{
		{"64 MiB", []string{"/usr/bin/python3", "-c", `import mmap, os
n = 64 << 20
m = mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
for i in range(0, n, 4096): m[i] = 1
os._exit(0)`}, 64 * mib, 96 * mib, 0},
		{"true", []string{"/bin/true"}, 0, 2 * mib, 0},
		{"pipeline, forks and signals", []string{"/bin/sh", "-c",
			`head -c 100000 /dev/zero | gzip | wc -c >/dev/null; sleep 5 & kill -TERM $!; wait $!; echo "term=$?"; sh -c 'kill -USR1 $$'; echo "usr1=$?"; exit 3`},
			0, 16 * mib, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := runTrial(t, dir, dryexec.TrialSpec{}, tt.argv...)
			if d.Process.ExitCode != tt.exit {
				t.Fatalf("exit %d, want %d; stdout %q stderr %q", d.Process.ExitCode, tt.exit, d.Process.Stdout, d.Process.Stderr)
			}
			m := d.Memory
			if m.Method != "smaps_exit" {
				t.Fatalf("method %q", m.Method)
			}
			if m.BytesWritten < tt.min || m.BytesWritten > tt.max || m.BytesWritten != m.PagesWritten*4096 {
				t.Errorf("bytes_written %d (%d pages), want %d..%d", m.BytesWritten, m.PagesWritten, tt.min, tt.max)
			}
			if tt.exit == 3 && !strings.Contains(d.Process.Stdout, "term=143") || tt.exit == 3 && !strings.Contains(d.Process.Stdout, "usr1=138") {
				t.Errorf("signals under tracing: %q", d.Process.Stdout)
			}
		})
	}
}
