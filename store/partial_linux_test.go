package store

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dryexec/dryexec"
)

// TestPartialCommit: after a selective commit the trial's other changes can
// still be committed, a path at a time or all, or discarded; the state says
// partial and what is left; a path committed twice is refused; committed
// content leaves the store at once (only what is left to commit is kept).
func TestPartialCommit(t *testing.T) {
	type step struct {
		op      string // "commit" or "discard"
		paths   []string
		wantErr error
		status  string
		left    []string // Remaining, relative
		onHost  []string // files on the host after the step
		blobs   int      // content blobs kept
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{"a path at a time, then the rest discarded", []step{
			{"commit", []string{"a.txt"}, nil, StatusPartial, []string{"b", "b/x", "b/y", "c.txt"}, []string{"a.txt"}, 3},
			{"commit", []string{"a.txt"}, dryexec.ErrAlreadyCommitted, StatusPartial, []string{"b", "b/x", "b/y", "c.txt"}, []string{"a.txt"}, 3},
			{"commit", []string{"b/x"}, nil, StatusPartial, []string{"b/y", "c.txt"}, []string{"a.txt", "b/x"}, 2},
			{"commit", []string{"b"}, nil, StatusPartial, []string{"c.txt"}, []string{"a.txt", "b/x", "b/y"}, 1},
			{"discard", nil, nil, StatusDiscarded, nil, []string{"a.txt", "b/x", "b/y"}, 0},
			{"commit", nil, dryexec.ErrDiscarded, StatusDiscarded, nil, []string{"a.txt", "b/x", "b/y"}, 0},
		}},
		{"a path, then all the rest", []step{
			{"commit", []string{"c.txt"}, nil, StatusPartial, []string{"a.txt", "b", "b/x", "b/y"}, []string{"c.txt"}, 3},
			{"commit", nil, nil, StatusCommitted, nil, []string{"a.txt", "b/x", "b/y", "c.txt"}, 0},
			{"discard", nil, dryexec.ErrAlreadyCommitted, StatusCommitted, nil, []string{"a.txt", "b/x", "b/y", "c.txt"}, 0},
		}},
		{"everything at once drops the content", []step{
			{"commit", nil, nil, StatusCommitted, nil, []string{"a.txt", "b/x", "b/y", "c.txt"}, 0},
		}},
		{"paths that select everything", []step{
			{"commit", []string{"a.txt", "b", "c.txt"}, nil, StatusCommitted, nil, []string{"a.txt", "b/x", "b/y", "c.txt"}, 0},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Open(t.TempDir(), 0)
			if err != nil {
				t.Fatal(err)
			}
			w := t.TempDir()
			abs := func(ps []string) []string {
				out := make([]string, len(ps))
				for i, p := range ps {
					out[i] = filepath.Join(w, p)
				}
				return out
			}
			id := signedTrial(t, s, "review", map[string]string{
				filepath.Join(w, "a.txt"): "a", filepath.Join(w, "b/x"): "x", filepath.Join(w, "b/y"): "y", filepath.Join(w, "c.txt"): "c",
			}, dryexec.FileChange{Path: filepath.Join(w, "b"), Op: dryexec.OpMkdir, Kind: dryexec.KindDir, Mode: "0755", UID: os.Getuid(), GID: os.Getgid()})
			for i, st := range tt.steps {
				switch st.op {
				case "commit":
					_, err = s.Commit(context.Background(), id, CommitOptions{Paths: abs(st.paths)})
				case "discard":
					err = s.Discard(id)
				}
				if !errors.Is(err, st.wantErr) || (st.wantErr == nil) != (err == nil) {
					t.Fatalf("step %d %s %v: %v, want %v", i, st.op, st.paths, err, st.wantErr)
				}
				state, err := s.StateOf(id)
				if err != nil {
					t.Fatal(err)
				}
				d, err := s.Load(id)
				if err != nil {
					t.Fatal(err)
				}
				rest, err := Remaining(d, state)
				if err != nil {
					t.Fatal(err)
				}
				var left []string
				for _, f := range rest {
					left = append(left, f.Path)
				}
				slices.Sort(left)
				if state.Status != st.status || !slices.Equal(left, abs(st.left)) {
					t.Errorf("step %d: status %s, left %q; want %s, %q", i, state.Status, left, st.status, abs(st.left))
				}
				var on []string
				filepath.WalkDir(w, func(p string, e os.DirEntry, err error) error {
					if err == nil && !e.IsDir() {
						on = append(on, p)
					}
					return nil
				})
				if !slices.Equal(on, abs(st.onHost)) {
					t.Errorf("step %d: host has %q, want %q", i, on, abs(st.onHost))
				}
				ents, _ := os.ReadDir(filepath.Join(s.trialDir(id), "blobs"))
				if len(ents) != st.blobs {
					t.Errorf("step %d: %d blobs kept, want %d", i, len(ents), st.blobs)
				}
			}
		})
	}
}
