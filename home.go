package dryexec

import (
	"errors"
	"path/filepath"
)

// ErrNoHome: none of DRYEXEC_HOME, XDG_STATE_HOME or HOME is set, so there is
// no default place for dryexec's state.
var ErrNoHome = errors.New("no DRYEXEC_HOME, XDG_STATE_HOME or HOME to keep dryexec's state in")

// DefaultHome is where dryexec keeps its state (the trial store, the receipt
// key, netsim's CA, a daemon's state dir) unless told otherwise:
// $DRYEXEC_HOME, else $XDG_STATE_HOME/dryexec, else ~/.local/state/dryexec.
// It lives here, not in the store, because the rungs need it too (to find
// the CA and to hide the state from every sandbox) and must not depend on the
// store. getenv reads the caller's environment.
func DefaultHome(getenv func(string) string) (string, error) {
	if d := getenv("DRYEXEC_HOME"); d != "" {
		return d, nil
	}
	if d := getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "dryexec"), nil
	}
	home := getenv("HOME")
	if home == "" {
		return "", ErrNoHome
	}
	return filepath.Join(home, ".local", "state", "dryexec"), nil
}
