package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/dryexec/dryexec"
)

// exchangesFile holds a trial's network exchanges (netsim records as JSON).
const exchangesFile = "network.json"

var _ dryexec.ExchangeSink = (*Trial)(nil)

// PutExchanges keeps the trial's network exchanges (dryexec.ExchangeSink).
// They are bounded and redacted by netsim; the store keeps them as given.
func (t *Trial) PutExchanges(records []byte) error {
	if err := t.open(); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(t.dir, exchangesFile), records, 0o600); err != nil {
		return fmt.Errorf("store: keeping the network exchanges: %w", err)
	}
	return nil
}

// Exchanges returns what PutExchanges kept for trial id: nil when the trial
// made no exchange.
func (s *Store) Exchanges(id string) ([]byte, error) {
	if !ValidID(id) {
		return nil, fmt.Errorf("%w: %q is not a trial id", dryexec.ErrTrialNotFound, id)
	}
	b, err := os.ReadFile(filepath.Join(s.trialDir(id), exchangesFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	return b, err
}
