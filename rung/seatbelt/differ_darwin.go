package seatbelt

import "github.com/dryexec/dryexec"

// newDiffer: package fsdelta's host half reads the host with openat2 and
// does not build for macOS, so a trial here cannot produce its delta. Its
// port (O_NOFOLLOW_ANY in place of RESOLVE_NO_SYMLINKS) is what stands
// between this rung and its first trial on a Mac.
func newDiffer(string, dryexec.TrialSpec, []string) (differ, error) {
	return nil, &dryexec.IsolationUnavailableError{Rung: Name, Missing: NoDiffer}
}
