package store

import (
	"os"
	"path/filepath"
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
			id := dryexec.NewTrialID()
			tr, err := s.Begin(id)
			if err != nil {
				t.Fatal(err)
			}
			d := &dryexec.StateDelta{TrialID: id}
			if tc.content != "" {
				sha, _, err := tr.PutBlob(strings.NewReader(tc.content))
				if err != nil {
					t.Fatal(err)
				}
				d.Files = []dryexec.FileChange{{Path: "/x", Op: dryexec.OpCreate, Kind: dryexec.KindFile, SHA256: sha}}
			}
			if err := tr.Save(d); err != nil {
				t.Fatal(err)
			}
			ents, err := os.ReadDir(filepath.Join(s.Dir(), "trials", id))
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, e := range ents {
				got = append(got, e.Name())
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("the trial's directory holds %v, want %v", got, tc.want)
			}
		})
	}
}
