// Package smallfront owns the small front: bin/dryexec as `make build`
// installs it on linux/amd64, a static program of a few kilobytes written
// without libc (c/front.c, committed built as elf_amd64.go by `make stub`).
// It starts in the time of /bin/true, where any Go program here takes
// several milliseconds more, which a trial through a warm daemon cannot
// afford. It decides nothing: it hands `dryexec run …` to the daemon's
// POST /v1/front, where the Go front's own code (internal/front.Serve)
// reads it exactly as the Go front would, and everything else — and
// anything the daemon does not take — to the Go front installed beside it
// as GoFrontName, which then does what bin/dryexec always did.
// docs/architecture.md, "The front and the engine".
package smallfront

import (
	"errors"
	"os"
	"path/filepath"
)

// GoFrontName is the Go front's file name beside the small front: the
// program the small front execs for whatever it does not send the daemon.
const GoFrontName = "dryexec-front"

// ErrUnsupported: the small front is built for linux/amd64 only; elsewhere
// bin/dryexec is the Go front itself.
var ErrUnsupported = errors.New("the small front is built for linux/amd64 only")

// Install writes the small front to path (mode 0755), replacing what is
// there only once the whole file is written.
func Install(path string) error {
	if frontELF == "" {
		return ErrUnsupported
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".dryexec-front-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(frontELF); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o755); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}
