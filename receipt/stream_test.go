package receipt

import (
	"encoding/json"
	"fmt"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/deltatest"
)

// TestDeltaDigestStreams: the digest hashed one file at a time is the one
// of the whole document's canonical form (what Verify recomputes from the
// stored bytes), for any files: none, many, non-UTF-8 paths, strings that
// look like the files member.
func TestDeltaDigestStreams(t *testing.T) {
	many := make([]dryexec.FileChange, 1000)
	for i := range many {
		many[i] = dryexec.FileChange{Path: fmt.Sprintf("/w/f%04d", i), Op: dryexec.OpCreate, Kind: dryexec.KindFile, Size: int64(i), Diff: "+é\u2028<\n"}
	}
	tests := []struct {
		name string
		d    dryexec.StateDelta
	}{
		{"empty", dryexec.StateDelta{}},
		{"many", dryexec.StateDelta{Files: many}},
		{"odd strings", dryexec.StateDelta{
			Action:   dryexec.Action{Env: map[string]string{"files": `"files":[]`}},
			Files:    []dryexec.FileChange{{Path: "/w/\xff", LinkTarget: `"files":[]`, MtimeNS: 1 << 62}},
			Warnings: []string{`"files":[]`}, Decision: dryexec.Decision{RiskScore: 0.125, Reasons: []string{"x"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.d.Normalize()
			doc, err := json.Marshal(&tt.d)
			if err != nil {
				t.Fatal(err)
			}
			want, err := Digest(doc)
			if err != nil {
				t.Fatal(err)
			}
			got, err := DeltaDigest(&tt.d)
			if err != nil || got != want {
				t.Fatalf("DeltaDigest %s, %v; want %s", got, err, want)
			}
			// Spilled (a big trial's changes, read back one at a time).
			if got, err := DeltaDigest(deltatest.Spilled(&tt.d)); err != nil || got != want {
				t.Fatalf("spilled: DeltaDigest %s, %v; want %s", got, err, want)
			}
		})
	}
}
