package store

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
)

// TestSaveWithoutContentMakesOneDir: a trial that kept no content is
// recorded as its directory and its delta only — no blobs dir, no lock
// file — and a trial with content still gets its blobs.
func TestSaveWithoutContentMakesOneDir(t *testing.T) {
	for _, tc := range []struct {
		name    string
		content string // "" puts no blob
		want    []string
	}{
		{name: "no content", want: []string{"delta.json"}},
		{name: "one blob", content: "hello", want: []string{"blobs", "delta.json"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := Open(t.TempDir(), time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			d := recordTrial(t, s, tc.content)
			if got := dirNames(t, s.trialDir(d.TrialID)); !slices.Equal(got, tc.want) {
				t.Fatalf("the trial's directory holds %v, want %v", got, tc.want)
			}
		})
	}
}

// recordTrial records a trial, Begin to Save, whose one file holds content
// ("": a trial without content), and returns its delta.
func recordTrial(t *testing.T, s *Store, content string) *dryexec.StateDelta {
	t.Helper()
	id := dryexec.NewTrialID()
	tr, err := s.Begin(id)
	if err != nil {
		t.Fatal(err)
	}
	d := &dryexec.StateDelta{TrialID: id, Rung: "ns"}
	if content != "" {
		sha, _, err := tr.PutBlob(strings.NewReader(content))
		if err != nil {
			t.Fatal(err)
		}
		d.Files = []dryexec.FileChange{{Path: "/x", Op: dryexec.OpCreate, Kind: dryexec.KindFile, SHA256: sha}}
	}
	if err := tr.Save(d); err != nil {
		t.Fatal(err)
	}
	return d
}

// dirNames lists the names in dir.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	return got
}
