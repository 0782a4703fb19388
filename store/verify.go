package store

import (
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/receipt"
)

// loadSigned reads trial id's delta.json once and returns the delta decoded
// from exactly those bytes after its receipt verified with the install's key:
// what a commit applies is then what this install signed, decision included,
// whatever was edited in the store since. Errors: dryexec.ErrTrialNotFound,
// *CorruptError, or one matching both dryexec.ErrUnverified and the
// receipt's reason (receipt.ErrTampered, ErrNoReceipt, ErrWrongKey, …).
func (s *Store) loadSigned(id string) (*dryexec.StateDelta, error) {
	raw, err := s.loadRaw(id)
	if err != nil {
		return nil, err
	}
	// A record that does not even decode is damaged (ErrCorrupt, which
	// discard removes) before it is unverified.
	var d dryexec.StateDelta
	if err := json.Unmarshal(raw, &d); err != nil {
		return nil, &CorruptError{ID: id, What: "delta.json", Err: err}
	}
	pub, err := s.installKey()
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", dryexec.ErrUnverified, id, err)
	}
	if _, err := receipt.Verify(raw, pub); err != nil {
		return nil, fmt.Errorf("%w: %s: %w; nothing was changed", dryexec.ErrUnverified, id, err)
	}
	// The receipt covers the trial id inside the delta, not the directory
	// it was found in: without this, one trial's record (committed or
	// discarded already) copied under a new id would commit again.
	if d.TrialID != id {
		return nil, fmt.Errorf("%w: %s: %w (it names %q); nothing was changed", dryexec.ErrUnverified, id, receipt.ErrOtherTrial, d.TrialID)
	}
	return &d, nil
}

// loadRaw returns the bytes of trial id's delta.json, as Load finds it.
func (s *Store) loadRaw(id string) ([]byte, error) {
	if !ValidID(id) {
		return nil, fmt.Errorf("%w: %q is not a trial id", dryexec.ErrTrialNotFound, id)
	}
	p := filepath.Join(s.trialDir(id), "delta.json")
	f, err := os.Open(p)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", dryexec.ErrTrialNotFound, id)
	}
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	defer f.Close()
	if st, err := f.Stat(); err == nil && time.Since(st.ModTime()) > s.ttl {
		os.RemoveAll(s.trialDir(id))
		return nil, fmt.Errorf("%w: %s (expired)", dryexec.ErrTrialNotFound, id)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, fmt.Errorf("store: %w", err)
	}
	return b, nil
}

// installKey is the public half of the key this install signs with: from
// the private key (which trials never see: it is masked in the sandbox), else
// from its public file. No key means nothing here was ever signed.
func (s *Store) installKey() (ed25519.PublicKey, error) {
	for _, f := range []string{receipt.KeyFile, receipt.PublicKeyFile} {
		p := filepath.Join(s.dir, f)
		if _, err := os.Lstat(p); err == nil {
			return receipt.LoadPublicKey(p)
		}
	}
	return nil, fmt.Errorf("%w: this install has no receipt key (%s)", receipt.ErrVerify, s.dir)
}
