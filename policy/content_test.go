package policy

import (
	"context"
	"math"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
)

// TestContentNotKept: a delta that cannot be committed whole never
// auto-commits: a file whose content was not kept needs a person, an
// incomplete delta is blocked, and sparse files whose sizes add up past
// int64 still count against max_bytes_written.
func TestContentNotKept(t *testing.T) {
	huge := func(p string) dryexec.FileChange {
		f := file(p, dryexec.OpCreate)
		f.Size = math.MaxInt64
		return f
	}
	tests := []struct {
		name   string
		delta  func(*dryexec.StateDelta)
		want   string
		reason string
	}{
		{"content kept", nil, AutoCommit, "nothing needs a person"},
		{"content not kept", func(d *dryexec.StateDelta) {
			d.Files[0].NotKept("the trial's content cap of 10 bytes is reached")
		}, Review, "the content of 1 file(s) was not kept, so commit cannot apply them: /w/a.txt (the trial's content cap of 10 bytes is reached)"},
		{"content kept explicitly", func(d *dryexec.StateDelta) {
			kept := true
			d.Files[0].ContentKept = &kept
		}, AutoCommit, "nothing needs a person"},
		{"incomplete", func(d *dryexec.StateDelta) {
			d.Incomplete, d.IncompleteReason = true, "the trial ran out of time"
		}, Block, "the delta is incomplete: the trial ran out of time"},
		{"sizes that overflow int64", func(d *dryexec.StateDelta) {
			d.Files = []dryexec.FileChange{huge("/w/a"), huge("/w/b")}
		}, Block, "more than max_bytes_written"},
	}
	e, err := Compile(Default())
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := baseDelta()
			if tt.delta != nil {
				tt.delta(d)
			}
			r := e.Decide(context.Background(), d)
			all := strings.Join(r.Decision.Reasons, "\n  ")
			if r.Decision.Choice != tt.want || !strings.Contains(all, tt.reason) {
				t.Errorf("choice %s, want %s with a reason saying %q; reasons:\n  %s", r.Decision.Choice, tt.want, tt.reason, all)
			}
		})
	}
}
