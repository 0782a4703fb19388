package dryexec

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
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
// while another session forks. Its name is pattern, this process's pid, "-"
// and os.MkdirTemp's random digits, so that SweepPrivateTemp can tell what a
// process that is gone left.
func PrivateTemp(getenv func(string) string, pattern string) (string, error) {
	home, err := DefaultHome(getenv)
	if err != nil {
		return "", err
	}
	base := filepath.Join(home, "tmp")
	if err := os.MkdirAll(base, 0o700); err != nil {
		return "", err
	}
	return os.MkdirTemp(base, pattern+strconv.Itoa(os.Getpid())+"-")
}

// SweepPrivateTemp removes what processes that are gone left in
// PrivateTemp's directory (a fork or an upload a crash cut short): each
// entry whose name carries the pid of no running process. An entry of a
// live pid stays (a reused pid keeps a leftover until that process ends too:
// the safe side), as does one whose name has no pid. It returns how many it
// removed.
func SweepPrivateTemp(getenv func(string) string) (int, error) {
	home, err := DefaultHome(getenv)
	if err != nil {
		return 0, err
	}
	base := filepath.Join(home, "tmp")
	entries, err := os.ReadDir(base)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for _, e := range entries {
		f := strings.Split(e.Name(), "-")
		if len(f) < 3 {
			continue
		}
		pid, err := strconv.Atoi(f[len(f)-2])
		if err != nil || pid <= 0 || syscall.Kill(pid, 0) != syscall.ESRCH {
			continue
		}
		if err := os.RemoveAll(filepath.Join(base, e.Name())); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}
