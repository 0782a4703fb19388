package server

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/dryexec/dryexec/internal/apiclient"
	"github.com/dryexec/dryexec/wire"
)

// stateDir is the daemon's own directory (mode 0700). It records what a live
// session keeps on the host outside any sandbox (the host rung's temp dir), so
// that the next start removes it if this daemon is killed. An ns sandbox needs
// no record: its guest dies with the daemon (parent-death signal) and its
// namespaces, overlays and scratch tmpfs with the guest. Half-recorded trials
// are the store's (Sweep), interrupted commits the journal's (Recover); all
// are cleaned by Service.Recover, never by opening the dir.
type stateDir struct {
	dir string
	log *slog.Logger
}

// sessionRecord is what a crash could leave of one session.
type sessionRecord struct {
	// PID is the daemon that owns the session: several daemons may share a
	// state dir (a user's and an SDK's private one), and a live one's
	// sessions are not leftovers.
	PID  int    `json:"pid"`
	Rung string `json:"rung"`
	// Tmp is the host rung's temp dir (workspace and baseline).
	Tmp string `json:"tmp,omitempty"`
}

func openStateDir(dir string, log *slog.Logger) (*stateDir, error) {
	if err := os.MkdirAll(filepath.Join(dir, "sessions"), 0o700); err != nil {
		return nil, fmt.Errorf("server: state dir: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return nil, fmt.Errorf("server: state dir: %w", err)
	}
	return &stateDir{dir: dir, log: log}, nil
}

// cleanLeftovers removes what sessions of a daemon that did not shut down
// cleanly left on the host (Service.Recover, at start-up). The records are written by this daemon only, but
// a removal is still limited to the temp dirs sessions make.
func (sd *stateDir) cleanLeftovers() {
	recs, _ := filepath.Glob(filepath.Join(sd.dir, "sessions", "*.json"))
	for _, p := range recs {
		b, err := os.ReadFile(p)
		var rec sessionRecord
		if err == nil && json.Unmarshal(b, &rec) == nil && rec.PID > 0 && rec.PID != os.Getpid() && alive(rec.PID) {
			continue
		}
		if err == nil && rec.Tmp != "" &&
			filepath.IsAbs(rec.Tmp) && strings.HasPrefix(filepath.Base(rec.Tmp), "dryexec-session-") {
			if n := killUnder(rec.Tmp); n > 0 {
				sd.log.Info("killed what a crashed daemon's host session left running", "processes", n)
			}
			os.RemoveAll(rec.Tmp)
		}
		os.Remove(p)
		sd.log.Info("cleaned what a crashed daemon's session left", "record", filepath.Base(p), "tmp", rec.Tmp)
	}
}

func (sd *stateDir) recordSession(id string, info wire.Ping) error {
	rec := sessionRecord{PID: os.Getpid(), Rung: info.Rung}
	if info.Rung == "host" && info.Workspace != "" {
		rec.Tmp = filepath.Dir(info.Workspace)
	}
	b, _ := json.Marshal(rec)
	p := filepath.Join(sd.dir, "sessions", id+".json")
	tmp := p + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, p)
}

func (sd *stateDir) forgetSession(id string) {
	os.Remove(filepath.Join(sd.dir, "sessions", id+".json"))
}

// alive reports whether process pid exists (signal 0 checks without sending).
func alive(pid int) bool {
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	err = p.Signal(syscall.Signal(0))
	return err == nil || errors.Is(err, syscall.EPERM)
}

// TokenFile is where the TCP listener's bearer token is kept.
func TokenFile(stateDir string) string { return apiclient.TokenFile(stateDir) }

// LoadOrCreateToken returns the bearer token in path, creating it (0600, 256
// random bits) on first use. A token file others can read is refused: anyone
// who can read it can run commands as the daemon's user.
func LoadOrCreateToken(path string) (string, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	var b [32]byte
	rand.Read(b[:])
	tok := hex.EncodeToString(b[:])
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		_, werr := f.WriteString(tok + "\n")
		cerr := f.Close()
		if werr != nil || cerr != nil {
			os.Remove(path)
			return "", fmt.Errorf("server: writing the token: %v", errors.Join(werr, cerr))
		}
		return tok, nil
	}
	if !errors.Is(err, os.ErrExist) {
		return "", fmt.Errorf("server: creating the token: %w", err)
	}
	info, err := os.Lstat(path)
	if err != nil {
		return "", err
	}
	if !info.Mode().IsRegular() || info.Mode().Perm()&0o077 != 0 {
		return "", fmt.Errorf("server: token file %s must be a regular file of mode 0600 (it is %v)", path, info.Mode())
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	tok = strings.TrimSpace(string(data))
	if len(tok) < 32 {
		return "", fmt.Errorf("server: token file %s holds no usable token (want at least 32 characters)", path)
	}
	return tok, nil
}

// tokenOK compares in constant time.
func tokenOK(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}
