package seatbelt

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/dryexec/dryexec"
)

// BenchmarkCloneWalkUntouched: what the snapshot and the walk cost on a
// tree of 10,000 files (100 dirs of 100) that the command left alone: two
// lstats a path and no content read.
func BenchmarkCloneWalkUntouched(b *testing.B) {
	root := b.TempDir()
	for d := range 100 {
		dir := filepath.Join(root, fmt.Sprintf("d%03d", d))
		if err := os.Mkdir(dir, 0o755); err != nil {
			b.Fatal(err)
		}
		for f := range 100 {
			if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%03d", f)), []byte("x\n"), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ResetTimer()
	for b.Loop() {
		snap, err := takeSnapshot(root)
		if err != nil {
			b.Fatal(err)
		}
		var r recorder
		if err := walkClone(root, snap, 1<<62, &r); err != nil {
			b.Fatal(err)
		}
		if len(r.got) != 0 {
			b.Fatalf("reported %d entries of an untouched tree", len(r.got))
		}
	}
}

// BenchmarkTrialNetwork: what netsim as the proxy adds to every trial
// (netsim.New with the CA loaded, the bundle written, two loopback
// listeners, and the stop that waits for its log), next to the baseline of
// starting and waiting for one process (`true`), in the same run.
func BenchmarkTrialNetwork(b *testing.B) {
	dir := b.TempDir()
	cfg, err := netConfig(dryexec.TrialSpec{NetCADir: filepath.Join(dir, "ca"), TrialID: "bench"}, func(string) string { return "" })
	if err != nil {
		b.Fatal(err)
	}
	b.Run("baseline exec true", func(b *testing.B) {
		for b.Loop() {
			if err := exec.Command("true").Run(); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("netsim proxy start and stop", func(b *testing.B) {
		for b.Loop() {
			n, err := startNet(context.Background(), cfg, filepath.Join(dir, "bundle.pem"))
			if err != nil {
				b.Fatal(err)
			}
			if err := n.finish(&dryexec.StateDelta{}); err != nil {
				b.Fatal(err)
			}
			os.Remove(filepath.Join(dir, "bundle.pem"))
		}
	})
}
