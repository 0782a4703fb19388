package seatbelt

import (
	"context"
	"fmt"
)

// SandboxExec is where macOS keeps the tool that applies an SBPL profile.
const SandboxExec = "/usr/bin/sandbox-exec"

// Lookups are what doctor's checks ask of the host. They are parameters so
// that the checks, which decide what to say, run and are tested on any OS;
// rung_darwin.go passes macOS's.
type Lookups struct {
	// Executable reports nil when an executable file is at path.
	Executable func(path string) error
	// Probe runs sandbox-exec with a profile that allows everything and a
	// command that does nothing: nil when Seatbelt applies profiles here.
	Probe func(ctx context.Context) error
	// FSType names the filesystem type at dir as statfs does ("apfs").
	FSType func(dir string) (string, error)
	// LookPath finds a program on PATH.
	LookPath func(name string) (string, error)
	// Dir is the directory whose filesystem is checked: doctor's current
	// directory, where a trial would clone its working directory from.
	Dir string
}

// Missing lists, one sentence each, what this host lacks for the seatbelt
// rung: sandbox-exec (present, and applying a profile), APFS at Dir
// (clonefile needs it), and a Go toolchain (to build or `go run` dryexec
// on a Mac, for which no binaries are published). Empty when nothing is.
func Missing(ctx context.Context, l Lookups) []string {
	var out []string
	if err := l.Executable(SandboxExec); err != nil {
		out = append(out, fmt.Sprintf("sandbox-exec (%s: %v): Seatbelt profiles are applied with it", SandboxExec, err))
	} else if err := l.Probe(ctx); err != nil {
		out = append(out, fmt.Sprintf("a working sandbox-exec (%s with an allow-all profile failed: %v)", SandboxExec, err))
	}
	switch fs, err := l.FSType(l.Dir); {
	case err != nil:
		out = append(out, fmt.Sprintf("APFS at %s (its filesystem could not be read: %v): a trial clones its working directory with clonefile", l.Dir, err))
	case fs != "apfs":
		out = append(out, fmt.Sprintf("APFS at %s (it is %s): a trial clones its working directory with clonefile, which only APFS has", l.Dir, fs))
	}
	if _, err := l.LookPath("go"); err != nil {
		out = append(out, "a Go toolchain (no go on PATH): dryexec is built, or run with go run ./cmd/dryexec, from source on macOS")
	}
	return out
}
