//go:build !linux && !darwin

package commit

import (
	"context"
	"errors"

	"github.com/dryexec/dryexec"
)

var errNotLinux = errors.New("commit: applying changes needs Linux (openat2, renameat2) in this build")

// Apply is not available on this OS yet.
func Apply(ctx context.Context, d *dryexec.StateDelta, opt Options) ([]dryexec.FileChange, error) {
	return nil, errNotLinux
}

// Recover has nothing to do where Apply never ran.
func Recover(dir string) ([]Recovered, error) { return nil, nil }
