package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dryexec/dryexec/internal/durable"
	"github.com/dryexec/dryexec/session"
)

// A park on disk, under the store's parked/ directory:
//
//	parked/<id>/                  a complete park: its sandbox's saved
//	                              state and park.json, the record
//	parked/.parking-<id>-<pid>/   a park daemon pid is writing
//	parked/.resuming-<id>-<pid>/  a park daemon pid has claimed to resume
//
// A park becomes complete by one rename, once its record is written and
// synced: a later daemon sees a whole park or none. A resume claims it by
// one rename too, so that two daemons sharing the store never both start
// it. GCParks removes what a crash left of either, expired parks and
// damaged ones.

// DefaultParkTTL is how long a park is kept when Config.ParkTTL is zero
// (`dryexec serve` reads DRYEXEC_PARK_TTL).
const DefaultParkTTL = 7 * 24 * time.Hour

// ErrParkDamaged: a park's record is missing, unreadable or does not match
// the files beside it. Such a park is never resumed; `dryexec gc` removes it.
var ErrParkDamaged = errors.New("parked session damaged")

// ErrParkClaimed: another daemon on the same store claimed the park first
// (to resume or drop it). It is also ErrSessionNotFound: the park is not
// this daemon's to take.
var ErrParkClaimed = fmt.Errorf("%w: parked session claimed by another daemon", ErrSessionNotFound)

const (
	parkRecordFile    = "park.json"
	parkRecordVersion = 1
	// maxParkRecord bounds the record read back (it holds the cache, at
	// most session.MaxCacheBytes, base64).
	maxParkRecord  = 2*session.MaxCacheBytes + 1<<20
	parkingPrefix  = ".parking-"
	resumingPrefix = ".resuming-"
)

// parkRecord is park.json.
type parkRecord struct {
	Version int `json:"version"`
	ParkedInfo
	// Owner is the daemon that holds the park's host side in memory (its
	// host objects' queue): another live daemon leaves it alone. 0: none
	// (its daemon exited).
	Owner int `json:"owner,omitempty"`
	// Files are the sandbox's saved state: each a plain name in the park's
	// directory with its size, checked before a resume.
	Files   map[string]int64    `json:"files"`
	Objects map[string][]string `json:"host_objects,omitempty"`
	Session session.ParkRecord  `json:"session"`
}

// DamagedPark is a park that cannot be resumed, and why.
type DamagedPark struct {
	SessionID string `json:"session_id"`
	Reason    string `json:"reason"`
}

func parkedRoot(storeDir string) string { return filepath.Join(storeDir, "parked") }

// writeParkRecord writes rec as dir/park.json: a temp file synced, renamed
// and the directory synced, so that a crash leaves the old record or the
// new one, never part of one.
func writeParkRecord(dir string, rec *parkRecord) error {
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if err := durable.WriteFile(filepath.Join(dir, parkRecordFile), b); err != nil {
		return fmt.Errorf("writing the park record: %w", err)
	}
	return nil
}

// readParkRecord reads and checks the record of the park in dir, whose
// directory name is id: every error is ErrParkDamaged with why.
func readParkRecord(dir, id string) (*parkRecord, error) {
	damaged := func(format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrParkDamaged, id, fmt.Sprintf(format, a...))
	}
	// Opened first, then checked, by its descriptor: the directory is
	// writable, and a record checked by name then opened could have become
	// a FIFO meanwhile (the open would block forever) or a link.
	f, err := openNoFollow(filepath.Join(dir, parkRecordFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, damaged("no record (%s): a park interrupted, or not a park", parkRecordFile)
	}
	if err != nil {
		return nil, damaged("the record is not a regular file of at most %d bytes: %v", maxParkRecord, err)
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() > maxParkRecord {
		return nil, damaged("the record is not a regular file of at most %d bytes", maxParkRecord)
	}
	var rec parkRecord
	if err := json.NewDecoder(io.LimitReader(f, maxParkRecord)).Decode(&rec); err != nil {
		return nil, damaged("the record does not parse: %v", err)
	}
	switch {
	case rec.Version != parkRecordVersion:
		return nil, damaged("record version %d (this daemon reads %d)", rec.Version, parkRecordVersion)
	case rec.SessionID != id:
		return nil, damaged("the record is of session %q", rec.SessionID)
	case rec.Rung == "" || rec.Rung != rec.Session.Rung:
		return nil, damaged("rung %q, session rung %q", rec.Rung, rec.Session.Rung)
	case rec.Parked.IsZero() || rec.Expires.IsZero():
		return nil, damaged("no park or expiry time")
	case len(rec.Files) == 0:
		return nil, damaged("no saved state named")
	}
	for name, size := range rec.Files {
		if name == "" || name == "." || name == ".." || filepath.Base(name) != name || name == parkRecordFile {
			return nil, damaged("saved state %q is not a file name in the park's directory", name)
		}
		fi, err := os.Lstat(filepath.Join(dir, name))
		if err != nil {
			return nil, damaged("saved state %s: %v", name, err)
		}
		if !fi.Mode().IsRegular() || fi.Size() != size {
			return nil, damaged("saved state %s: want a regular file of %d bytes, have %v of %d", name, size, fi.Mode().Type(), fi.Size())
		}
	}
	for name, methods := range rec.Objects {
		if !validObjectName(name) || len(methods) != len(rec.Session.Allow[name]) {
			return nil, damaged("host object %q does not match the session's allowlist", name)
		}
	}
	if len(rec.Objects) != len(rec.Session.Allow) {
		return nil, damaged("host objects do not match the session's allowlist")
	}
	if err := rec.Session.Check(); err != nil {
		return nil, damaged("%v", err)
	}
	return &rec, nil
}

// openNoFollow opens p for reading if it is not a link, without blocking
// on a FIFO (the caller checks what it opened).
func openNoFollow(p string) (*os.File, error) {
	return os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
}

// parkFiles lists the regular files in dir with their sizes: the saved
// state a record names.
func parkFiles(dir string) (map[string]int64, int64) {
	ents, _ := os.ReadDir(dir)
	out := map[string]int64{}
	var n int64
	for _, e := range ents {
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() && e.Name() != parkRecordFile {
			out[e.Name()] = fi.Size()
			n += fi.Size()
		}
	}
	return out, n
}

// pendingPark parses a .parking-/.resuming- entry's name: the session and
// the daemon at work on it.
func pendingPark(name string) (id string, pid int, ok bool) {
	rest, ok := strings.CutPrefix(name, parkingPrefix)
	if !ok {
		if rest, ok = strings.CutPrefix(name, resumingPrefix); !ok {
			return "", 0, false
		}
	}
	i := strings.LastIndexByte(rest, '-')
	if i < 0 {
		return "", 0, false
	}
	pid, err := strconv.Atoi(rest[i+1:])
	if err != nil || pid <= 0 || !validSessionID(rest[:i]) {
		return "", 0, false
	}
	return rest[:i], pid, true
}

// claimedBy is the pid of the other daemon that holds a claim on park id
// in root (a .resuming- entry), or 0.
func claimedBy(root, id string) int {
	ents, _ := os.ReadDir(root)
	for _, e := range ents {
		got, pid, ok := pendingPark(e.Name())
		if ok && got == id && pid != os.Getpid() && strings.HasPrefix(e.Name(), resumingPrefix) {
			return pid
		}
	}
	return 0
}

// openParkedRoot is the store's parked/ directory, refused unless it is a
// directory itself (not a symlink): every removal below it stays in it.
// ok is false when there is none.
func openParkedRoot(storeDir string) (root string, ok bool, err error) {
	root = parkedRoot(storeDir)
	fi, err := os.Lstat(root)
	if errors.Is(err, os.ErrNotExist) {
		return root, false, nil
	}
	if err != nil {
		return root, false, err
	}
	if !fi.IsDir() {
		return root, false, fmt.Errorf("server: %s is not a directory (%v): refusing to touch it", root, fi.Mode().Type())
	}
	return root, true, nil
}

// RemovedPark is one park GCParks removed, and why.
type RemovedPark struct {
	SessionID string `json:"session_id"`
	Reason    string `json:"reason"`
	Bytes     int64  `json:"bytes"`
}

// GCParks removes, under the store storeDir, the parks that cannot or
// should not be resumed: expired ones (past their expiry, set at park from
// the parking daemon's TTL), damaged ones (record missing or unreadable,
// saved state missing or not of its recorded size), and what a park or
// resume interrupted by a crash left (its daemon is gone). A live daemon's
// park or resume in progress is left alone. It removes only entries of the
// parked/ directory (each park's own directory, never a symlink's target)
// and says what it removed. `dryexec gc` and a daemon's Recover call it.
func GCParks(storeDir string, now time.Time) ([]RemovedPark, error) {
	root, ok, err := openParkedRoot(storeDir)
	if err != nil || !ok {
		return nil, err
	}
	ents, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	var out []RemovedPark
	for _, e := range ents {
		name := e.Name()
		p := filepath.Join(root, name)
		fi, err := os.Lstat(p)
		if err != nil {
			continue
		}
		id, pid, pending := pendingPark(name)
		var reason string
		switch {
		case pending && pid != os.Getpid() && alive(pid):
			continue
		case pending && strings.HasPrefix(name, parkingPrefix):
			reason = "a park interrupted (its daemon is gone)"
		case pending:
			reason = "a resume interrupted (its daemon is gone): the saved state may have run, it is not resumed again"
		case !validSessionID(name):
			continue // not a park's name: not gc's
		case !fi.IsDir():
			id, reason = name, fmt.Sprintf("not a park directory (%v)", fi.Mode().Type())
		default:
			id = name
			rec, err := readParkRecord(p, name)
			switch {
			case err != nil:
				reason = err.Error()
			case now.After(rec.Expires):
				reason = fmt.Sprintf("expired at %s", rec.Expires.UTC().Format(time.RFC3339))
			default:
				continue
			}
		}
		var n int64
		if fi.IsDir() {
			_, n = parkFiles(p)
		}
		// os.RemoveAll removes a symlink, not what it points to, and does
		// not follow the links beneath a directory.
		if err := os.RemoveAll(p); err != nil {
			return out, err
		}
		out = append(out, RemovedPark{SessionID: id, Reason: reason, Bytes: n})
	}
	return out, nil
}
