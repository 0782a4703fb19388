//go:build linux || darwin

package commit

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/dryexec/dryexec/internal/durable"
)

const (
	statePlanned = "planned"
	stateStaged  = "staged"
	stateApplied = "applied"
)

type journal struct {
	Trial string `json:"trial"`
	State string `json:"state"`
	Steps []step `json:"steps"`
}

// The journal on disk names each directory once, in a table of (parent,
// name) entries, and each step by its directory's index and its base names
// (a temp and a backup are always beside their target). Why: a directory
// chain 5,000 levels deep has 5,000 paths of up to 10,000 bytes; spelled out
// in every step, the journal written three times per commit was 25 MB.
//
// A host path is any bytes, and encoding/json would write the invalid UTF-8
// of a name as U+FFFD (a rollback would then act on another name). So a name
// that is not UTF-8 is carried as base64 too, as a delta does (path_b64), and
// decoding takes that. A journal of the older form (full paths in each step,
// no table) is still read.

type stepJSON step // step without its methods

type stepWire struct {
	stepJSON
	// Dir is the index of the step's directory in journalWire.Dirs; nil in
	// the older form, where Path, Temp and Backup are full paths.
	Dir       *int   `json:"dir,omitempty"`
	LinkToDir int    `json:"link_to_dir,omitempty"`
	PathB64   string `json:"path_b64,omitempty"`
	TempB64   string `json:"temp_b64,omitempty"`
	BackupB64 string `json:"backup_b64,omitempty"`
	LinkB64   string `json:"link_b64,omitempty"`
	LinkToB64 string `json:"link_to_b64,omitempty"`
}

type dirEntry struct {
	Parent  int    `json:"p"`
	Name    string `json:"n"`
	NameB64 string `json:"n_b64,omitempty"`
}

type journalWire struct {
	Trial string `json:"trial"`
	State string `json:"state"`
	// Dirs[0] is "/" (its entry is empty).
	Dirs  []dirEntry `json:"dirs,omitempty"`
	Steps []stepWire `json:"steps"`
}

// exact sets *b64 when *v is not UTF-8 (and *v to its readable form).
func exact(v, b64 *string) {
	if !utf8.ValidString(*v) {
		*b64 = base64.StdEncoding.EncodeToString([]byte(*v))
		*v = strings.ToValidUTF8(*v, "\uFFFD")
	}
}

// unexact restores *v from *b64.
func unexact(v, b64 *string) error {
	if *b64 == "" {
		return nil
	}
	raw, err := base64.StdEncoding.DecodeString(*b64)
	if err != nil {
		return fmt.Errorf("journal: %q: %w", *v, err)
	}
	*v = string(raw)
	return nil
}

func (j journal) MarshalJSON() ([]byte, error) {
	w := journalWire{Trial: j.Trial, State: j.State, Dirs: []dirEntry{{}}, Steps: make([]stepWire, len(j.Steps))}
	index := map[string]int{"/": 0}
	dirOf := func(d string) int {
		if i, ok := index[d]; ok {
			return i
		}
		// Parents first, without recursing once per level of a deep tree.
		var chain []string
		for a := d; ; a = parentDir(a) {
			if _, ok := index[a]; ok {
				break
			}
			chain = append(chain, a)
		}
		for k := len(chain) - 1; k >= 0; k-- {
			a := chain[k]
			e := dirEntry{Parent: index[parentDir(a)], Name: a[strings.LastIndexByte(a, '/')+1:]}
			exact(&e.Name, &e.NameB64)
			index[a] = len(w.Dirs)
			w.Dirs = append(w.Dirs, e)
		}
		return index[d]
	}
	base := func(p string) string {
		if p == "" {
			return ""
		}
		return p[strings.LastIndexByte(p, '/')+1:]
	}
	for i, s := range j.Steps {
		sw := stepWire{stepJSON: stepJSON(s)}
		d := dirOf(parentDir(s.Path))
		sw.Dir = &d
		sw.Path, sw.Temp, sw.Backup = base(s.Path), base(s.Temp), base(s.Backup)
		if s.LinkTo != "" {
			sw.LinkToDir, sw.LinkTo = dirOf(parentDir(s.LinkTo)), base(s.LinkTo)
		}
		for _, f := range []struct{ v, b64 *string }{{&sw.Path, &sw.PathB64}, {&sw.Temp, &sw.TempB64},
			{&sw.Backup, &sw.BackupB64}, {&sw.Link, &sw.LinkB64}, {&sw.LinkTo, &sw.LinkToB64}} {
			exact(f.v, f.b64)
		}
		w.Steps[i] = sw
	}
	return json.Marshal(w)
}

func (j *journal) UnmarshalJSON(b []byte) error {
	var w journalWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	dirs := make([]string, len(w.Dirs))
	for i, e := range w.Dirs {
		if i == 0 {
			dirs[0] = "/"
			continue
		}
		if err := unexact(&e.Name, &e.NameB64); err != nil {
			return err
		}
		if e.Parent < 0 || e.Parent >= i || e.Name == "" || strings.Contains(e.Name, "/") {
			return fmt.Errorf("journal: bad directory entry %d", i)
		}
		dirs[i] = path.Join(dirs[e.Parent], e.Name)
	}
	in := func(d int, name string) (string, error) {
		if d < 0 || d >= len(dirs) {
			return "", fmt.Errorf("journal: no directory %d", d)
		}
		if name == "" {
			return "", nil
		}
		return path.Join(dirs[d], name), nil
	}
	j.Trial, j.State, j.Steps = w.Trial, w.State, make([]step, len(w.Steps))
	for i, sw := range w.Steps {
		for _, f := range []struct{ v, b64 *string }{{&sw.Path, &sw.PathB64}, {&sw.Temp, &sw.TempB64},
			{&sw.Backup, &sw.BackupB64}, {&sw.Link, &sw.LinkB64}, {&sw.LinkTo, &sw.LinkToB64}} {
			if err := unexact(f.v, f.b64); err != nil {
				return err
			}
		}
		s := step(sw.stepJSON)
		if sw.Dir != nil {
			var err error
			for _, f := range []*string{&s.Path, &s.Temp, &s.Backup} {
				if *f, err = in(*sw.Dir, *f); err != nil {
					return err
				}
			}
			if s.LinkTo != "" {
				if s.LinkTo, err = in(sw.LinkToDir, s.LinkTo); err != nil {
					return err
				}
			}
		}
		j.Steps[i] = s
	}
	return nil
}

func journalPath(dir, trial string) string { return filepath.Join(dir, trial+".json") }

// writeJournal replaces the journal durably: temp file, fsync, rename, fsync dir.
func writeJournal(dir string, j *journal) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("commit: journal dir: %w", err)
	}
	b, err := json.Marshal(j)
	if err != nil {
		return fmt.Errorf("commit: encoding journal: %w", err)
	}
	if err := durable.WriteFile(journalPath(dir, j.Trial), b); err != nil {
		return fmt.Errorf("commit: writing journal: %w", err)
	}
	return nil
}

func removeJournal(dir, trial string) error {
	if err := os.Remove(journalPath(dir, trial)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return durable.SyncDir(dir)
}

// Recover finishes or rolls back every commit a crash left in dir. The caller
// must hold the lock that keeps commits out while it runs.
func Recover(dir string) ([]Recovered, error) {
	ents, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("commit: reading journals: %w", err)
	}
	var out []Recovered
	var errs []error
	for _, e := range ents {
		name := e.Name()
		if strings.HasSuffix(name, ".json.tmp") {
			os.Remove(filepath.Join(dir, name)) // never renamed into place: nothing was touched after it
			continue
		}
		if !strings.HasSuffix(name, ".json") {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			errs = append(errs, err)
			continue
		}
		var j journal
		if err := json.Unmarshal(b, &j); err != nil || j.Trial+".json" != name {
			errs = append(errs, fmt.Errorf("commit: journal %s is unreadable; left in place: %v", name, err))
			continue
		}
		r := Recovered{Trial: j.Trial}
		if j.State == stateApplied {
			finish(&j)
			r.Committed = true
		} else if err := undo(&j, nil); err != nil {
			errs = append(errs, fmt.Errorf("commit: rolling back %s: %w", j.Trial, err))
			continue
		}
		if err := removeJournal(dir, j.Trial); err != nil {
			errs = append(errs, err)
			continue
		}
		out = append(out, r)
	}
	return out, errors.Join(errs...)
}
