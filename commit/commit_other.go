//go:build !linux

package commit

import (
	"context"
	"errors"
	"io"
	"log/slog"

	"github.com/dryexec/dryexec"
)

// Options is one commit's input; see the Linux implementation.
type Options struct {
	Paths      []string
	Force      bool
	ForcePaths []string
	OpenBlob   func(sha string) (io.ReadCloser, error)
	JournalDir string
	Hook       func(point int)
	Log        *slog.Logger
}

// Recovered says what Recover did with one journal.
type Recovered struct {
	Trial     string
	Committed bool
}

var errNotLinux = errors.New("commit: applying changes needs Linux (openat2, renameat2) in this build")

// Apply is not available on this OS yet.
func Apply(ctx context.Context, d *dryexec.StateDelta, opt Options) ([]dryexec.FileChange, error) {
	return nil, errNotLinux
}

// Recover has nothing to do where Apply never ran.
func Recover(dir string) ([]Recovered, error) { return nil, nil }
