package gvisor_test

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec/internal/procfs"
	"github.com/dryexec/dryexec/session"
)

// forkBenchFiles is the workspace a session fork is measured on here: the
// gvisor fork copies the trees, so its cost grows with them.
const forkBenchFiles = 1000

// BenchmarkSessionFork times fork(1) of a session whose workspace holds
// forkBenchFiles files (100 of them written after the push), on gvisor and
// on ns in the same run, interleaved, and reports each one's median (ms),
// gvisor's pause of its parent, gvisor's ratio to ns, and the proportional
// set size (PSS, MiB) of one gvisor branch's sandbox (runsc, its sandbox
// and gofer processes, by the cgroup the branch was given):
//
//	go test -run '^$' -bench SessionFork -benchtime 5x ./rung/gvisor
func BenchmarkSessionFork(b *testing.B) {
	requireBoth(b)
	ctx := context.Background()
	tree := b.TempDir()
	for i := range forkBenchFiles {
		d := filepath.Join(tree, "d"+strconv.Itoa(i%10))
		os.MkdirAll(d, 0o755)
		if err := os.WriteFile(filepath.Join(d, "f"+strconv.Itoa(i)), []byte(strings.Repeat("x", i%200)+"\n"), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	open := func(rung string) *session.Session {
		s, err := session.Open(ctx, session.Options{Rung: rung})
		if err != nil {
			b.Fatalf("%s session: %v", rung, err)
		}
		b.Cleanup(func() { s.Close() })
		if err := s.PushDir(ctx, tree); err != nil {
			b.Fatal(err)
		}
		if r, err := s.Shell(ctx, "for i in $(seq 100); do echo $i > d0/new$i; done", time.Minute); err != nil || r.ExitCode != 0 {
			b.Fatalf("writing: %v %+v", err, r)
		}
		return s
	}
	gv, ns := open("gvisor"), open("ns")
	var gvMS, nsMS, pauseMS, pssMiB []float64
	for b.Loop() {
		for _, c := range []struct {
			s   *session.Session
			out *[]float64
		}{{gv, &gvMS}, {ns, &nsMS}} {
			before := gvGroups()
			t0 := time.Now()
			bs, err := c.s.Fork(ctx, 1)
			if err != nil {
				b.Fatal(err)
			}
			*c.out = append(*c.out, float64(time.Since(t0).Microseconds())/1000)
			if c.s == gv {
				pauseMS = append(pauseMS, float64(c.s.ForkPause().Microseconds())/1000)
				pssMiB = append(pssMiB, newGroupsPSS(before)/(1<<20))
			}
			for _, br := range bs {
				br.Close()
			}
		}
	}
	med := func(v []float64) float64 {
		slices.Sort(v)
		return v[len(v)/2]
	}
	b.ReportMetric(0, "ns/op")
	b.ReportMetric(med(gvMS), "gvisor-ms")
	b.ReportMetric(med(nsMS), "ns-ms")
	b.ReportMetric(med(pauseMS), "gvisor-pause-ms")
	b.ReportMetric(med(gvMS)/med(nsMS), "gvisor/ns")
	b.ReportMetric(med(pssMiB), "gvisor-branch-PSS-MiB")
}

// gvGroups maps each process to its cgroup path, for the processes in a
// gvisor sandbox's cgroup ("gv-ID").
func gvGroups() map[int]string {
	out := map[int]string{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cg, err := os.ReadFile("/proc/" + e.Name() + "/cgroup")
		if err != nil || !bytes.Contains(cg, []byte("/gv-")) {
			continue
		}
		out[pid] = string(cg)
	}
	return out
}

// newGroupsPSS sums the PSS (bytes) of the processes in gvisor cgroups that
// none of before's processes was in: the sandbox a fork just opened.
func newGroupsPSS(before map[int]string) float64 {
	old := map[string]bool{}
	for _, cg := range before {
		old[cg] = true
	}
	var sum float64
	for pid, cg := range gvGroups() {
		if old[cg] {
			continue
		}
		_, p := procfs.Rollup(pid)
		sum += float64(p)
	}
	return sum
}
