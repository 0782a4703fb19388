package linuxns

import (
	"context"
	"testing"

	"github.com/dryexec/dryexec"
)

// BenchmarkColdTrialTrue is one cold trial of /bin/true, everything on
// (seccomp with its supervisor, Landlock, memory tracing): run it on a tree
// without the containment to see what it costs (docs/containment.md).
func BenchmarkColdTrialTrue(b *testing.B) {
	if err := (&Rung{}).Available(context.Background()); err != nil {
		b.Skip(err)
	}
	dir := b.TempDir()
	r := &Rung{}
	for b.Loop() {
		spec := dryexec.TrialSpec{Action: dryexec.Action{Argv: []string{"/bin/true"}, Cwd: dir, Env: testPath}}
		if _, err := r.Trial(context.Background(), spec); err != nil {
			b.Fatal(err)
		}
	}
}
