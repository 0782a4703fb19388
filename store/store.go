// Package store owns trials kept on disk between `dryexec run` and a later
// `commit` or `discard`: one directory per trial under $DRYEXEC_HOME/trials,
// holding the StateDelta (delta.json) and the new content of every created or
// modified file, content-addressed by sha256 (blobs/, made by the first blob:
// a trial without content has none). A trial directory appears
// under its final name only once complete (written as .partial, then renamed), so
// a crash mid-trial leaves nothing that looks like a trial.
package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/dryexec/dryexec"
)

// Store is a directory of trials. Methods may be called from several processes at
// once: every write goes to a temp name and is renamed into place, and commits
// are serialised by a lock file.
type Store struct {
	dir    string
	ttl    time.Duration
	limits Limits
	spares spares // the spare trial directory, if the store keeps one (spare.go)
}

// DefaultTTL is how long a trial is kept when nothing says otherwise.
const DefaultTTL = 24 * time.Hour

// Open creates dir (0700) if needed and returns the store in it. Trials older
// than ttl (0: DefaultTTL) count as expired and are removed by Sweep.
func Open(dir string, ttl time.Duration) (*Store, error) {
	if err := os.MkdirAll(filepath.Join(dir, "trials"), 0o700); err != nil {
		return nil, fmt.Errorf("store: creating %s: %w", dir, err)
	}
	if ttl <= 0 {
		ttl = DefaultTTL
	}
	return &Store{dir: dir, ttl: ttl}, nil
}

// TTL is how long a trial is kept.
func (s *Store) TTL() time.Duration { return s.ttl }

// Dir is the store's root directory.
func (s *Store) Dir() string { return s.dir }

// ValidID reports whether id has the shape of a trial id ("tr_" and 20
// characters of lower-case base32); anything else could name a path outside
// the store. By hand rather than by a regexp: the store's sweeps check
// every name in its trials directory, thousands at every command.
func ValidID(id string) bool {
	const prefix, n = "tr_", 20
	if len(id) != len(prefix)+n || id[:len(prefix)] != prefix {
		return false
	}
	for i := len(prefix); i < len(id); i++ {
		if c := id[i]; (c < 'a' || c > 'z') && (c < '2' || c > '7') {
			return false
		}
	}
	return true
}

func (s *Store) trialDir(id string) string { return filepath.Join(s.dir, "trials", id) }

// Trial is a trial being recorded. It is a dryexec.BlobSink.
type Trial struct {
	id   string
	dir  string // the .partial directory until Save
	s    *Store
	once sync.Once // open
	err  error     // open's
	lock *os.File  // the .partial dir, flocked while recording: Sweep leaves a locked .partial alone
	// delta: delta.json, made by open when it took a spare (spare.go),
	// else by Save.
	delta *os.File
	// blobsMade: blobDir made the blobs dir.
	blobsMade bool

	// What PutBlob may still store (limits.go), taken at the first blob.
	capOverride int64
	budgetTaken bool
	budget      budget
	buf         []byte // PutBlob's, made at the first blob
}

var _ dryexec.BlobSink = (*Trial)(nil)

// Begin starts recording trial id. Nothing is written until the trial has
// something to keep (a blob, its exchanges, its delta); most trials' first
// write is Save. Why: the directory, its blobs dir and the lock made up
// front cost a daemon's warm trial 0.3–1 ms here, a tenth of it.
func (s *Store) Begin(id string) (*Trial, error) {
	if !ValidID(id) {
		return nil, fmt.Errorf("store: invalid trial id %q", id)
	}
	return &Trial{id: id, dir: s.trialDir(id) + ".partial", s: s}, nil
}

// open makes the trial's .partial directory and takes its lock, once. The
// lock is an flock on the directory itself, not on a file in it, and the
// blobs dir is made by the first blob (blobDir): a trial without content —
// most of a daemon's trials — then costs one new inode instead of three
// (mkdir, mkdir, create) and no unlink, each an inode allocation on the
// store's file system (ext4 here: 20–50 µs apiece, measured with perf in the
// daemon's trial path).
//
// A store that keeps a spare (KeepSpare) hands it over instead: the trial
// is then recorded in the spare's directory (tr_….spare, already made and
// locked, delta.json already created), which Save renames to the trial's
// id as it would the .partial.
func (t *Trial) open() error {
	t.once.Do(func() {
		if sp := t.s.takeSpare(); sp != nil {
			t.dir, t.lock, t.delta = sp.dir, sp.lock, sp.delta
			return
		}
		if err := os.Mkdir(t.dir, 0o700); err != nil {
			t.err = fmt.Errorf("store: %w", err)
			return
		}
		lock, err := lockDir(t.dir)
		if err != nil {
			os.RemoveAll(t.dir)
			t.err = err
			return
		}
		t.lock = lock
	})
	return t.err
}

// blobDir is the trial's blobs directory, made at the first call.
func (t *Trial) blobDir() (string, error) {
	dir := filepath.Join(t.dir, "blobs")
	if !t.blobsMade {
		if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("store: %w", err)
		}
		t.blobsMade = true
	}
	return dir, nil
}

// Save writes the delta, drops blobs it does not refer to (identical rewrites),
// and publishes the trial under its id. When it fails, the trial is aborted.
func (t *Trial) Save(d *dryexec.StateDelta) error {
	if err := t.open(); err != nil {
		return err
	}
	// Without a blob put (PutBlob makes buf at the first), there is none
	// to drop: a trial without content skips the listing.
	if t.buf != nil {
		// A sorted list of binary hashes, not a set of strings: for a million
		// files it is 32 MB, a map or strings several times that.
		keep := make([][sha256.Size]byte, 0, d.NumFiles())
		if err := d.EachFile(func(f *dryexec.FileChange) error {
			var h [sha256.Size]byte
			if n, err := hex.Decode(h[:], []byte(f.SHA256)); err == nil && n == len(h) {
				keep = append(keep, h)
			}
			return nil
		}); err != nil {
			t.Abort()
			return err
		}
		slices.SortFunc(keep, func(a, b [sha256.Size]byte) int { return bytes.Compare(a[:], b[:]) })
		keep = slices.Compact(keep)
		if dir, err := os.Open(filepath.Join(t.dir, "blobs")); err == nil {
			for {
				names, err := dir.Readdirnames(4096)
				for _, name := range names {
					var h [sha256.Size]byte
					n, herr := hex.Decode(h[:], []byte(name))
					_, found := slices.BinarySearchFunc(keep, h, func(a, b [sha256.Size]byte) int { return bytes.Compare(a[:], b[:]) })
					if herr != nil || n != len(h) || !found {
						os.Remove(filepath.Join(t.dir, "blobs", name))
					}
				}
				if err != nil {
					break
				}
			}
			dir.Close()
		}
	}
	// Not synced: a trial's record is what a later commit reviews, and a
	// commit re-hashes every byte it applies (its blobs were never synced
	// either). After a machine crash an unsynced record may be missing or
	// read back as corrupt (ErrCorrupt), never wrong; the fsync cost a
	// daemon's warm trial 1–3 ms here, a third of it.
	// A trial that cannot be saved is dropped whole here, so that no caller
	// can leave a half-recorded .partial behind (a full disk did).
	// Written in place, without writeFile's temporary file and rename:
	// nobody reads a .partial directory, and its rename below is what
	// publishes the delta whole.
	if t.delta == nil {
		f, err := createInPlace(filepath.Join(t.dir, "delta.json"))
		if err != nil {
			t.Abort()
			return err
		}
		t.delta = f
	}
	err := writeDelta(t.delta, d)
	t.delta = nil // closed
	if err != nil {
		t.Abort()
		return err
	}
	if err := os.Rename(t.dir, t.s.trialDir(t.id)); err != nil {
		t.Abort()
		return fmt.Errorf("store: publishing trial: %w", err)
	}
	t.dir = t.s.trialDir(t.id)
	t.lock.Close()
	t.s.refillSpare()
	return nil
}

// writeDelta writes d to f (not synced) and closes it: a new file in a
// directory nobody reads yet, streaming d's files (StateDelta.WriteJSON): a
// delta of a million files is never whole in memory as JSON.
func writeDelta(f *os.File, d *dryexec.StateDelta) error {
	err := d.WriteJSON(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("store: writing %s: %w", filepath.Base(f.Name()), err)
	}
	return nil
}

// Abort removes a trial that will not be saved.
func (t *Trial) Abort() {
	if t.lock == nil {
		return // nothing was written
	}
	if t.delta != nil {
		t.delta.Close()
		t.delta = nil
	}
	os.RemoveAll(t.dir)
	t.lock.Close()
	t.s.refillSpare()
}

// writeJSON writes v to path through a temporary file and a rename, so that
// a reader sees the old or the new file whole; with durable, the new file is
// synced before the rename.
func writeJSON(path string, v any, durable bool) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("store: encoding %s: %w", filepath.Base(path), err)
	}
	return writeFile(path, durable, func(w io.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	})
}

// writeFile writes what write produces to path through a temporary file and
// a rename (synced first with durable); on failure nothing is left but the
// old file, if any.
func writeFile(path string, durable bool, write func(io.Writer) error) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("store: %w", err)
	}
	err = write(f)
	if err == nil && durable {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("store: writing %s: %w", filepath.Base(path), err)
	}
	return nil
}

// Load returns the stored delta of trial id.
func (s *Store) Load(id string) (*dryexec.StateDelta, error) {
	b, err := s.loadRaw(id)
	if err != nil {
		return nil, err
	}
	var d dryexec.StateDelta
	if err := json.Unmarshal(b, &d); err != nil {
		return nil, &CorruptError{ID: id, What: "delta.json", Err: err}
	}
	return &d, nil
}

// ErrCorrupt: a stored trial cannot be read back as it was recorded (its
// delta.json does not decode, a content blob is missing or not what the delta
// says). See *CorruptError. Discard removes such a trial.
var ErrCorrupt = errors.New("stored trial is corrupt")

// CorruptError names the corrupt trial and the part of it that is damaged.
type CorruptError struct {
	ID   string
	What string // "delta.json", "content blob …"
	Err  error
}

func (e *CorruptError) Error() string {
	return fmt.Sprintf("store: trial %s is corrupt: %s: %v (discard removes it)", e.ID, e.What, e.Err)
}

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

func (e *CorruptError) Unwrap() error { return e.Err }

// BlobPath is where the content with hash sha of trial id is kept.
func (s *Store) BlobPath(id, sha string) string {
	return filepath.Join(s.trialDir(id), "blobs", sha)
}

// Summary is one line of List.
type Summary struct {
	ID      string
	Created time.Time
	Delta   *dryexec.StateDelta
	State   State
}

// List returns the stored trials, newest first. Unreadable trials are skipped.
func (s *Store) List() ([]Summary, error) {
	ents, err := os.ReadDir(filepath.Join(s.dir, "trials"))
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	var out []Summary
	for _, e := range ents {
		if !ValidID(e.Name()) || strings.Contains(e.Name(), ".") {
			continue
		}
		d, err := s.Load(e.Name())
		if err != nil {
			continue
		}
		// When the trial was recorded: delta.json is written once, by
		// Save (the directory's own time moves with every commit or
		// discard, which reordered the list and reset AGE).
		info, err := os.Stat(filepath.Join(s.trialDir(e.Name()), "delta.json"))
		if err != nil {
			continue
		}
		out = append(out, Summary{ID: e.Name(), Created: info.ModTime(), Delta: d, State: s.readState(e.Name())})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Created.After(out[j].Created) })
	return out, nil
}

// DeltaFile returns the path of trial id's delta.json, as written (a verifier
// must read the bytes, not a re-encoding of them).
func (s *Store) DeltaFile(id string) (string, error) {
	if !ValidID(id) {
		return "", fmt.Errorf("%w: %q is not a trial id", dryexec.ErrTrialNotFound, id)
	}
	p := filepath.Join(s.trialDir(id), "delta.json")
	if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("%w: %s", dryexec.ErrTrialNotFound, id)
	} else if err != nil {
		return "", fmt.Errorf("store: %w", err)
	}
	return p, nil
}
