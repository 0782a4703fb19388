package store

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/receipt"
)

// signedTrial records a trial creating each of files (host path → content)
// in s, decided choice and signed with the install's key, and returns its id.
func signedTrial(t *testing.T, s *Store, choice string, files map[string]string, extra ...dryexec.FileChange) string {
	t.Helper()
	signer, err := receipt.LoadOrCreate(s.Dir())
	if err != nil {
		t.Fatal(err)
	}
	id := dryexec.NewTrialID()
	tr, err := s.Begin(id)
	if err != nil {
		t.Fatal(err)
	}
	d := &dryexec.StateDelta{TrialID: id, Rung: "ns", Decision: dryexec.Decision{Choice: choice, Reasons: []string{choice + ": because"}}}
	paths := make([]string, 0, len(files))
	for p := range files {
		paths = append(paths, p)
	}
	slices.Sort(paths)
	for _, p := range paths {
		sha, n, err := tr.PutBlob(strings.NewReader(files[p]))
		if err != nil {
			t.Fatal(err)
		}
		d.Files = append(d.Files, dryexec.FileChange{Path: p, Op: dryexec.OpCreate, Kind: dryexec.KindFile, Mode: "0644",
			Size: n, SHA256: sha, UID: os.Getuid(), GID: os.Getgid()})
	}
	d.Files = append(d.Files, extra...)
	d.Normalize()
	d.ComputeTotals()
	if err := signer.Sign(d); err != nil {
		t.Fatal(err)
	}
	if err := tr.Save(d); err != nil {
		t.Fatal(err)
	}
	return id
}

// editDelta rewrites trial id's stored delta.json with edit applied, keeping
// its receipt: what an attacker with write access to the store would do.
func editDelta(t *testing.T, s *Store, id string, edit func(d *dryexec.StateDelta)) {
	t.Helper()
	d, err := s.Load(id)
	if err != nil {
		t.Fatal(err)
	}
	edit(d)
	b, _ := json.MarshalIndent(d, "", "  ")
	if err := os.WriteFile(filepath.Join(s.trialDir(id), "delta.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// stampOld sets the mtime of dirs an hour back; untouched then fails if
// anything was created or removed in them since (a temp made and removed
// again changes a directory's mtime too).
func stampOld(t *testing.T, dirs ...string) time.Time {
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	for _, d := range dirs {
		if err := os.Chtimes(d, old, old); err != nil {
			t.Fatal(err)
		}
	}
	return old
}

func untouched(t *testing.T, old time.Time, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		fi, err := os.Stat(d)
		if err != nil {
			t.Fatal(err)
		}
		if !fi.ModTime().Equal(old) {
			t.Errorf("%s was written to", d)
		}
		if ents, _ := os.ReadDir(d); len(ents) > 0 {
			t.Errorf("%s holds %v", d, ents)
		}
	}
}

// TestCommitVerifies: commit applies only what this install signed. A
// stored delta edited after signing (a file pointed elsewhere, a decision
// changed), one with no receipt or another install's, and a content blob
// that is not what the signed delta says are all refused before the host
// changes at all.
func TestCommitVerifies(t *testing.T) {
	cases := []struct {
		name   string
		tamper func(t *testing.T, s *Store, id, host, elsewhere string)
		want   error // errors.Is
		also   error
	}{
		{"a file pointed elsewhere", func(t *testing.T, s *Store, id, host, elsewhere string) {
			editDelta(t, s, id, func(d *dryexec.StateDelta) { d.Files[0].Path = filepath.Join(elsewhere, "passwd") })
		}, dryexec.ErrUnverified, receipt.ErrTampered},
		{"a block turned into auto_commit", func(t *testing.T, s *Store, id, host, elsewhere string) {
			editDelta(t, s, id, func(d *dryexec.StateDelta) { d.Decision.Choice = "auto_commit" })
		}, dryexec.ErrUnverified, receipt.ErrTampered},
		{"no receipt", func(t *testing.T, s *Store, id, host, elsewhere string) {
			editDelta(t, s, id, func(d *dryexec.StateDelta) { d.Receipt = dryexec.Receipt{} })
		}, dryexec.ErrUnverified, receipt.ErrNoReceipt},
		{"re-signed with another key", func(t *testing.T, s *Store, id, host, elsewhere string) {
			other, err := receipt.LoadOrCreate(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			editDelta(t, s, id, func(d *dryexec.StateDelta) {
				d.Files[0].Path = filepath.Join(elsewhere, "passwd")
				other.Sign(d)
			})
		}, dryexec.ErrUnverified, receipt.ErrWrongKey},
		{"a content blob replaced", func(t *testing.T, s *Store, id, host, elsewhere string) {
			d, _ := s.Load(id)
			if err := os.WriteFile(s.BlobPath(id, d.Files[1].SHA256), []byte("evil\n"), 0o600); err != nil {
				t.Fatal(err)
			}
		}, dryexec.ErrUnverified, ErrCorrupt},
		{"a content blob missing", func(t *testing.T, s *Store, id, host, elsewhere string) {
			d, _ := s.Load(id)
			os.Remove(s.BlobPath(id, d.Files[1].SHA256))
		}, dryexec.ErrUnverified, ErrCorrupt},
		{"another trial's signed delta and blobs replayed", func(t *testing.T, s *Store, id, host, elsewhere string) {
			// Each part verifies on its own: the receipt is this install's,
			// over exactly these bytes, and the blobs hash right. Only the
			// trial it names is not the one being committed.
			other := signedTrial(t, s, "auto_commit", map[string]string{filepath.Join(elsewhere, "passwd"): "evil\n"})
			raw, err := os.ReadFile(filepath.Join(s.trialDir(other), "delta.json"))
			if err != nil {
				t.Fatal(err)
			}
			d, _ := s.Load(other)
			blob, err := os.ReadFile(s.BlobPath(other, d.Files[0].SHA256))
			if err != nil {
				t.Fatal(err)
			}
			must(t, os.WriteFile(s.BlobPath(id, d.Files[0].SHA256), blob, 0o600))
			must(t, os.WriteFile(filepath.Join(s.trialDir(id), "delta.json"), raw, 0o600))
			must(t, os.RemoveAll(s.trialDir(other)))
		}, dryexec.ErrUnverified, receipt.ErrOtherTrial},
		{"the install's key gone", func(t *testing.T, s *Store, id, host, elsewhere string) {
			os.Remove(filepath.Join(s.Dir(), receipt.KeyFile))
			os.Remove(filepath.Join(s.Dir(), receipt.PublicKeyFile))
		}, dryexec.ErrUnverified, receipt.ErrVerify},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s, err := Open(t.TempDir(), 0)
			if err != nil {
				t.Fatal(err)
			}
			host, elsewhere := t.TempDir(), t.TempDir()
			id := signedTrial(t, s, "block", map[string]string{filepath.Join(host, "a"): "a\n", filepath.Join(host, "b"): "b\n"})
			c.tamper(t, s, id, host, elsewhere)
			old := stampOld(t, host, elsewhere)
			_, err = s.CommitWith(context.Background(), id, CommitOptions{AllowBlocked: true})
			if !errors.Is(err, c.want) || !errors.Is(err, c.also) || !errors.Is(err, dryexec.ErrCommitRefused) {
				t.Fatalf("CommitWith: %v, want %v and %v", err, c.want, c.also)
			}
			untouched(t, old, host, elsewhere)
			if st, _ := s.StateOf(id); st.Status != StatusPending {
				t.Errorf("state %+v after a refused commit", st)
			}
		})
	}
}

// TestCommitBlocked: a trial decided block is refused unless the caller
// overrides it; the override (who, when, the decision) stays with the trial.
func TestCommitBlocked(t *testing.T) {
	s, err := Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	host := t.TempDir()
	id := signedTrial(t, s, "block", map[string]string{filepath.Join(host, "a"): "a\n"})
	old := stampOld(t, host)
	_, err = s.CommitWith(context.Background(), id, CommitOptions{})
	if !errors.Is(err, dryexec.ErrBlocked) || !errors.Is(err, dryexec.ErrCommitRefused) || !strings.Contains(err.Error(), "block: because") {
		t.Fatalf("CommitWith: %v, want ErrBlocked with the reasons", err)
	}
	untouched(t, old, host)
	before := time.Now().UTC()
	r, err := s.CommitWith(context.Background(), id, CommitOptions{AllowBlocked: true, By: "api: alice"})
	if err != nil {
		t.Fatalf("CommitWith AllowBlocked: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(host, "a")); string(b) != "a\n" {
		t.Errorf("a = %q", b)
	}
	st, err := s.StateOf(id)
	if err != nil {
		t.Fatal(err)
	}
	o := st.Override
	if st.Status != StatusCommitted || o == nil || o.By != "api: alice" || o.Decision != "block" || o.At.Before(before.Truncate(time.Second)) ||
		!slices.Equal(o.Reasons, []string{"block: because"}) || r.Override == nil || r.Override.By != o.By {
		t.Errorf("state %+v (override %+v), result %+v", st, o, r)
	}
	// A review or auto_commit trial needs nothing, and records no override.
	for _, choice := range []string{"review", "auto_commit", ""} {
		id := signedTrial(t, s, choice, map[string]string{filepath.Join(host, "f"+choice): "x\n"})
		if _, err := s.CommitWith(context.Background(), id, CommitOptions{}); err != nil {
			t.Fatalf("%q: %v", choice, err)
		}
		if st, _ := s.StateOf(id); st.Override != nil {
			t.Errorf("%q: override recorded: %+v", choice, st.Override)
		}
	}
	// Without By, the override names the user this process runs as.
	id = signedTrial(t, s, "block", map[string]string{filepath.Join(host, "c"): "c\n"})
	if _, err := s.CommitWith(context.Background(), id, CommitOptions{AllowBlocked: true}); err != nil {
		t.Fatal(err)
	}
	if st, _ := s.StateOf(id); st.Override == nil || !strings.Contains(st.Override.By, "uid ") {
		t.Errorf("override %+v", st.Override)
	}
}

// TestCommitSkipped: what SkipUncommittable leaves out is in the result and
// in the trial's state.
func TestCommitSkipped(t *testing.T) {
	s, err := Open(t.TempDir(), 0)
	if err != nil {
		t.Fatal(err)
	}
	host := t.TempDir()
	big := dryexec.FileChange{Path: filepath.Join(host, "big"), Op: dryexec.OpCreate, Kind: dryexec.KindFile, Mode: "0644", Size: 1 << 40}
	big.NotKept("over the content quota")
	id := signedTrial(t, s, "review", map[string]string{filepath.Join(host, "a"): "a\n"}, big)
	var ue *dryexec.UncommittableError
	if _, err := s.CommitWith(context.Background(), id, CommitOptions{}); !errors.As(err, &ue) || ue.Paths[0].Path != big.Path {
		t.Fatalf("CommitWith: %v, want an UncommittableError naming big", err)
	}
	r, err := s.CommitWith(context.Background(), id, CommitOptions{SkipUncommittable: true})
	if err != nil {
		t.Fatal(err)
	}
	st, _ := s.StateOf(id)
	if len(r.Applied) != 1 || len(r.Skipped) != 1 || r.Skipped[0].Path != big.Path || len(st.Skipped) != 1 ||
		!strings.Contains(st.Skipped[0].Reason, "over the content quota") {
		t.Errorf("result %+v, state %+v", r, st)
	}
	if _, err := os.Lstat(big.Path); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("big was written: %v", err)
	}
}

// TestCommitErrorsEscapeNames: a refused commit names the paths it refused,
// and the CLI prints that error on the user's terminal; a name the command
// chose must not steer it. C1 controls (U+009B is CSI to a terminal that
// reads UTF-8), bidi overrides and invalid bytes come out escaped in every
// error that names a path: a conflict, an uncommittable path, an unsafe way.
func TestCommitErrorsEscapeNames(t *testing.T) {
	names := []string{"csi\u009b2J\u009b31m", "osc\u009d52;c;eA==\u009c", "bidi\u202etxt.exe", "nel\u0085+ passwd", "esc\x1b[1A", "bad\xff\x9b"}
	cases := []struct {
		name  string
		setup func(t *testing.T, s *Store, host, name string) string // the trial's id
	}{
		{"conflict", func(t *testing.T, s *Store, host, name string) string {
			id := signedTrial(t, s, "review", map[string]string{filepath.Join(host, name): "new\n"})
			must(t, os.WriteFile(filepath.Join(host, name), []byte("host's\n"), 0o644))
			return id
		}},
		{"uncommittable", func(t *testing.T, s *Store, host, name string) string {
			c := dryexec.FileChange{Path: filepath.Join(host, name), Op: dryexec.OpCreate, Kind: dryexec.KindFile, Mode: "0644", Size: 1}
			c.NotKept("over the quota")
			return signedTrial(t, s, "review", nil, c)
		}},
		{"unsafe way", func(t *testing.T, s *Store, host, name string) string {
			id := signedTrial(t, s, "review", map[string]string{filepath.Join(host, name, "f"): "new\n"})
			must(t, os.Symlink(t.TempDir(), filepath.Join(host, name)))
			return id
		}},
	}
	for _, c := range cases {
		for _, name := range names {
			t.Run(c.name+"/"+strings.ToValidUTF8(name, "?"), func(t *testing.T) {
				s, err := Open(t.TempDir(), 0)
				must(t, err)
				host := t.TempDir()
				id := c.setup(t, s, host, name)
				_, err = s.CommitWith(context.Background(), id, CommitOptions{})
				if err == nil {
					t.Fatal("the commit was not refused")
				}
				msg := err.Error()
				for i, r := range msg {
					if r == '\n' {
						continue
					}
					if r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f || r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069 || r == utf8.RuneError {
						t.Fatalf("raw %U at %d in %q", r, i, msg)
					}
				}
			})
		}
	}
}

// TestCommitDiscardRace: commits and discards of one trial at once, from
// separate Store values as separate processes would hold: exactly one wins,
// every other is refused with the reason (already committed, discarded),
// and the host and the trial's state agree with the winner.
func TestCommitDiscardRace(t *testing.T) {
	dir := t.TempDir()
	for round := range 8 {
		s, err := Open(dir, 0)
		must(t, err)
		host := t.TempDir()
		id := signedTrial(t, s, "review", map[string]string{filepath.Join(host, "a"): "a\n", filepath.Join(host, "b"): "b\n"})
		start := make(chan struct{})
		errs := make(chan error, 6)
		for i := range 6 {
			go func() {
				s, err := Open(dir, 0) // its own handle, as another process's
				if err != nil {
					errs <- err
					return
				}
				<-start
				if (i+round)%2 == 0 {
					_, err = s.CommitWith(context.Background(), id, CommitOptions{})
				} else {
					err = s.Discard(id)
				}
				errs <- err
			}()
		}
		close(start)
		wins := 0
		for range 6 {
			err := <-errs
			switch {
			case err == nil:
				wins++
			case errors.Is(err, dryexec.ErrAlreadyCommitted), errors.Is(err, dryexec.ErrDiscarded):
			default:
				t.Fatalf("round %d: %v", round, err)
			}
		}
		st, _ := s.StateOf(id)
		_, aErr := os.Stat(filepath.Join(host, "a"))
		_, bErr := os.Stat(filepath.Join(host, "b"))
		switch {
		case wins != 1:
			t.Fatalf("round %d: %d winners", round, wins)
		case st.Status == StatusCommitted && (aErr != nil || bErr != nil):
			t.Fatalf("round %d: committed, but the host has a: %v, b: %v", round, aErr, bErr)
		case st.Status == StatusDiscarded && (aErr == nil || bErr == nil):
			t.Fatalf("round %d: discarded, but the host has a or b", round)
		case st.Status != StatusCommitted && st.Status != StatusDiscarded:
			t.Fatalf("round %d: status %q", round, st.Status)
		}
		if l := leftoverNames(t, host); len(l) > 0 {
			t.Fatalf("round %d: left on the host: %v", round, l)
		}
	}
}

// leftoverNames lists the commit's temp and backup names in dir.
func leftoverNames(t *testing.T, dir string) []string {
	ents, err := os.ReadDir(dir)
	must(t, err)
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), ".dryexec-") {
			out = append(out, e.Name())
		}
	}
	return out
}
