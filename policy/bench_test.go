package policy

import (
	"context"
	"fmt"
	"testing"

	"github.com/dryexec/dryexec"
)

// bigDelta is a delta with files file changes (creates and modifies beneath
// cwd, a few deletes) and reqs network entries (mocked).
func bigDelta(files, reqs int) *dryexec.StateDelta {
	d := &dryexec.StateDelta{Action: dryexec.Action{Argv: []string{"make"}, Cwd: "/home/u/proj"}}
	for i := range files {
		op := dryexec.OpCreate
		if i%10 == 1 {
			op = dryexec.OpModify
		}
		d.Files = append(d.Files, dryexec.FileChange{Path: fmt.Sprintf("/home/u/proj/build/obj/dir%d/file%d.o", i%100, i),
			Op: op, Kind: dryexec.KindFile, Size: 1024, Mode: "0644", SHA256: "00"})
	}
	for i := range reqs {
		d.Network = append(d.Network, dryexec.NetworkEvent{Proto: "https", Method: "GET", URL: fmt.Sprintf("https://api.example.com/v1/items/%d", i),
			Host: "api.example.com", Port: 443, Status: 200, Action: "mocked"})
	}
	d.Normalize()
	d.ComputeTotals()
	return d
}

// BenchmarkDecide measures one decision over a delta of 10,000 file changes
// and 1,000 network entries, with the default policy (22 denied and 23
// sensitive patterns, the built-in review checks) plus the CEL rule
// `size(delta.network) > 0`; the cel-per-entry case adds two CEL rules that
// visit every file and every request. ns/1k-entries is the time per 1,000
// entries (files + requests).
//
//	go test ./policy -run '^$' -bench Decide -benchtime 2s
func BenchmarkDecide(b *testing.B) {
	for _, tc := range []struct {
		name        string
		files, reqs int
		perFile     bool // add a CEL rule that visits every file and request
	}{
		{"files=10000,net=1000", 10000, 1000, false},
		{"files=10000,net=1000,cel-per-entry", 10000, 1000, true},
		{"files=1000,net=100", 1000, 100, false},
	} {
		b.Run(tc.name, func(b *testing.B) {
			p := Default()
			p.Rules = append(p.Rules, Rule{Name: "net", Expr: "size(delta.network) > 0", Result: Review, Reason: "uses the network"})
			if tc.perFile {
				p.Rules = append(p.Rules,
					Rule{Name: "sql", Expr: `delta.files.exists(f, f.path.endsWith(".sql"))`, Result: Review, Reason: "a migration"},
					Rule{Name: "prod", Expr: `delta.network.exists(n, n.host.endsWith(".prod"))`, Result: Block, Reason: "production"})
			}
			e, err := Compile(p)
			if err != nil {
				b.Fatal(err)
			}
			d := bigDelta(tc.files, tc.reqs)
			ctx := context.Background()
			b.ReportAllocs()
			cpu0 := cpuTime()
			for b.Loop() {
				e.Decide(ctx, d)
			}
			// Wall time per 1,000 entries, and CPU time per decision: on a
			// shared, loaded machine the second is the steadier figure.
			perOp := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			b.ReportMetric(perOp/float64(tc.files+tc.reqs)*1000, "ns/1k-entries")
			if cpu0 >= 0 {
				b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
			}
		})
	}
}
