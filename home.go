package dryexec

import (
	"errors"
	"os"
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

// PrivateTemp makes a new directory (os.MkdirTemp's pattern) for state of a
// sandbox's that no other sandbox may read: a fork's memory image and copied
// upper dirs, a spilled delta, an uploaded tree. It is made under
// DefaultHome's tmp/, which every rung hides from its sandboxes with the rest
// of the home, never under os.TempDir: the host's /tmp is in every
// sandbox's view, and a sandbox's root can read a 0700 directory there
// while another session forks.
func PrivateTemp(getenv func(string) string, pattern string) (string, error) {
	home, err := DefaultHome(getenv)
	if err != nil {
		return "", err
	}
	base := filepath.Join(home, "tmp")
	if err := os.MkdirAll(base, 0o700); err != nil {
		return "", err
	}
	return os.MkdirTemp(base, pattern)
}
