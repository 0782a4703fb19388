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
// and 1,000 network entries, with the default policy (3 CEL rules, 22 denied
// and 23 sensitive patterns) plus a network rule. The per-1,000-entries figure
// is reported as ns/1k-entries.
func BenchmarkDecide(b *testing.B) {
	for _, tc := range []struct {
		name        string
		files, reqs int
	}{{"files=10000,net=1000", 10000, 1000}, {"files=1000,net=100", 1000, 100}} {
		b.Run(tc.name, func(b *testing.B) {
			p := Default()
			p.Rules = append(p.Rules, Rule{Name: "net", Expr: "size(delta.network) > 0", Result: Review, Reason: "uses the network"})
			e, err := Compile(p)
			if err != nil {
				b.Fatal(err)
			}
			d := bigDelta(tc.files, tc.reqs)
			ctx := context.Background()
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				e.Decide(ctx, d)
			}
			perOp := float64(b.Elapsed().Nanoseconds()) / float64(b.N)
			b.ReportMetric(perOp/float64(tc.files+tc.reqs)*1000, "ns/1k-entries")
		})
	}
}
