package fsdelta

import (
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
)

// referenceSort is the order sortChanges must give, as it was first written:
// split paths compared part by part, a copy of every change.
func referenceSort(changes []dryexec.FileChange) {
	rmdirs := map[string]bool{}
	for _, fc := range changes {
		if fc.Op == dryexec.OpRmdir {
			rmdirs[fc.Path] = true
		}
	}
	type keyed struct {
		parts []string
		post  bool
		fc    dryexec.FileChange
	}
	ks := make([]keyed, len(changes))
	for i, fc := range changes {
		ks[i] = keyed{strings.Split(fc.Path, "/"), rmdirs[fc.Path], fc}
	}
	slices.SortStableFunc(ks, func(a, b keyed) int {
		for i := 0; i < len(a.parts) && i < len(b.parts); i++ {
			if c := strings.Compare(a.parts[i], b.parts[i]); c != 0 {
				return c
			}
		}
		switch {
		case len(a.parts) < len(b.parts):
			if a.post {
				return 1
			}
			return -1
		case len(a.parts) > len(b.parts):
			if b.post {
				return -1
			}
			return 1
		}
		return 0
	})
	for i := range ks {
		changes[i] = ks[i].fc
	}
}

// TestSortChangesInPlace: sorting indices and permuting in place gives the
// reference order, on random trees with names that share prefixes, sort
// around "/" ("a-b", "a.b", "a0"), replaced paths and removed dirs.
func TestSortChangesInPlace(t *testing.T) {
	names := []string{"a", "a-b", "a.b", "a0", "ab", "b", "\xff", "A"}
	ops := []dryexec.Op{dryexec.OpCreate, dryexec.OpDelete, dryexec.OpRmdir, dryexec.OpMkdir}
	r := rand.New(rand.NewPCG(1, 2))
	for round := range 300 {
		n := r.IntN(60)
		var cs []dryexec.FileChange
		for i := range n {
			depth := 1 + r.IntN(4)
			p := "/w"
			for range depth {
				p += "/" + names[r.IntN(len(names))]
			}
			cs = append(cs, dryexec.FileChange{Path: p, Op: ops[r.IntN(len(ops))], Size: int64(i)})
		}
		want := slices.Clone(cs)
		referenceSort(want)
		sortChanges(cs)
		if !slices.Equal(cs, want) {
			t.Fatalf("round %d:\ngot  %v\nwant %v", round, cs, want)
		}
	}
}

// sortChanges sorts a slice of changes as the Differ sorts its spool
// (sortRecs), for the tests that check that order.
func sortChanges(changes []dryexec.FileChange) {
	recs := make([]rec, len(changes))
	for i := range changes {
		recs[i] = rec{path: changes[i].Path, off: int64(i), rmdir: changes[i].Op == dryexec.OpRmdir}
	}
	sortRecs(recs)
	out := make([]dryexec.FileChange, len(changes))
	for i, r := range recs {
		out[i] = changes[r.off]
	}
	copy(changes, out)
}
