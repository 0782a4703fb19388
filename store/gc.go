package store

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// GCResult is what GC did.
type GCResult struct {
	// Removed is the number of trials removed: expired, half-recorded by a
	// killed run, or left by an interrupted discard.
	Removed int
	// Dropped is the number of committed or discarded trials whose content
	// was still kept (a crash came between the commit and the drop).
	Dropped int
	// Freed is the disk space that freed, in bytes.
	Freed int64
}

// GC removes what the store no longer needs: expired trials, what crashes
// left (half-recorded trials, interrupted discards), and the content of
// committed or discarded trials, which a commit or discard drops at once but
// a crash may have left. A trial being recorded or committed is left alone.
func (s *Store) GC() (GCResult, error) { return s.gc(true) }

// gc is GC; measure says whether to measure what it freed (a walk of the
// whole store, before and after).
func (s *Store) gc(measure bool) (GCResult, error) {
	var before int64
	if measure {
		before = s.usage()
	}
	var r GCResult
	// One listing serves both passes: a trial the sweep removed has no
	// content left for the second to find.
	names, err := readNames(filepath.Join(s.dir, "trials"))
	if err != nil {
		return r, fmt.Errorf("store: %w", err)
	}
	r.Removed = s.sweepNames(names, true)
	// Under the store's lock, so that no commit is between its state and its
	// drop of the content.
	l, err := s.lock()
	if err != nil {
		return r, err
	}
	for _, id := range names {
		if !ValidID(id) {
			continue
		}
		// Content first: most trials keep none (they wrote no file, or
		// their commit or discard dropped it), and a stat is cheaper than
		// reading a state (thousands of trials, at every due GC).
		blobs := filepath.Join(s.trialDir(id), "blobs")
		if _, err := os.Lstat(blobs); err != nil {
			continue
		}
		switch s.readState(id).Status {
		case StatusCommitted, StatusDiscarded:
			os.RemoveAll(blobs)
			r.Dropped++
		}
	}
	l.Close()
	if measure {
		after := s.usage()
		r.Freed = max(0, before-after)
	}
	return r, nil
}

// SweepLeftovers removes what crashes left that is found by name (half-
// recorded trials, interrupted discards): cheap enough for every command.
func (s *Store) SweepLeftovers() (int, error) { return s.sweep(false) }

// Usage is what the store holds.
type Usage struct {
	Trials int
	// Bytes is the disk space of everything under the store's trials
	// (allocated blocks: a sparse file counts what it takes).
	Bytes int64
}

// Usage measures the store (a walk of its trials' files).
func (s *Store) Usage() (Usage, error) {
	var u Usage
	ents, err := os.ReadDir(filepath.Join(s.dir, "trials"))
	if err != nil {
		return u, err
	}
	for _, e := range ents {
		if ValidID(e.Name()) && !strings.Contains(e.Name(), ".") {
			u.Trials++
		}
	}
	u.Bytes = s.usage()
	return u, nil
}
