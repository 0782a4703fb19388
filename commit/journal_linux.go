package commit

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"
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

// A host path is any bytes; encoding/json would write the invalid UTF-8 of a
// name as U+FFFD, and a rollback would then act on another name. So a step
// whose names are not UTF-8 carries them as base64 too, as a delta does
// (path_b64), and decoding takes those.

type stepJSON step // step without its methods

type stepWire struct {
	stepJSON
	PathB64   string `json:"path_b64,omitempty"`
	TempB64   string `json:"temp_b64,omitempty"`
	BackupB64 string `json:"backup_b64,omitempty"`
	LinkB64   string `json:"link_b64,omitempty"`
	LinkToB64 string `json:"link_to_b64,omitempty"`
}

func (s step) MarshalJSON() ([]byte, error) {
	w := stepWire{stepJSON: stepJSON(s)}
	for _, f := range []struct{ v, b64 *string }{{&w.Path, &w.PathB64}, {&w.Temp, &w.TempB64},
		{&w.Backup, &w.BackupB64}, {&w.Link, &w.LinkB64}, {&w.LinkTo, &w.LinkToB64}} {
		if !utf8.ValidString(*f.v) {
			*f.b64 = base64.StdEncoding.EncodeToString([]byte(*f.v))
			*f.v = strings.ToValidUTF8(*f.v, "\uFFFD")
		}
	}
	return json.Marshal(w)
}

func (s *step) UnmarshalJSON(b []byte) error {
	var w stepWire
	if err := json.Unmarshal(b, &w); err != nil {
		return err
	}
	for _, f := range []struct{ v, b64 *string }{{&w.Path, &w.PathB64}, {&w.Temp, &w.TempB64},
		{&w.Backup, &w.BackupB64}, {&w.Link, &w.LinkB64}, {&w.LinkTo, &w.LinkToB64}} {
		if *f.b64 == "" {
			continue
		}
		raw, err := base64.StdEncoding.DecodeString(*f.b64)
		if err != nil {
			return fmt.Errorf("journal step %q: %w", w.Path, err)
		}
		*f.v = string(raw)
	}
	*s = step(w.stepJSON)
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
	p := journalPath(dir, j.Trial)
	tmp := p + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("commit: journal: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err == nil {
		err = syncDir(dir)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("commit: writing journal: %w", err)
	}
	return nil
}

func removeJournal(dir, trial string) error {
	if err := os.Remove(journalPath(dir, trial)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
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
