package commit

import (
	"errors"
	"io"
	"log/slog"

	"github.com/dryexec/dryexec"
)

// ErrContentMismatch: a stored content blob is not the content the trial
// recorded (its sha256 or size differ). Nothing was changed on the host: it is
// found while staging, before the first rename.
var ErrContentMismatch = errors.New("does not match the reviewed hash")

// Options is one commit's input.
type Options struct {
	// Paths selects what to commit: absolute host paths; a directory selects
	// everything beneath it. Empty commits every change.
	Paths []string
	// Force commits over conflicts at every path; ForcePaths only at and beneath
	// the paths named. Forcing reaches the trial's state from the host's: the
	// removal of something already gone is skipped, a modify of a deleted file
	// creates it, a create over a host's new file or symlink replaces it, a
	// mkdir over a host's new dir keeps that dir. A path whose kind changed
	// (a file where the trial had a dir, or the reverse) is never forced, nor
	// one that leads through a symlink.
	Force      bool
	ForcePaths []string
	// SkipUncommittable commits everything else when some changes cannot be
	// committed (a socket or device node, content that was not kept), which
	// are otherwise refused with a *dryexec.UncommittableError. Exactly those
	// paths are left out, each reported to OnSkip.
	SkipUncommittable bool
	OnSkip            func(dryexec.Uncommittable)
	// OpenBlob opens the stored content whose sha256 is sha.
	OpenBlob func(sha string) (io.ReadCloser, error)
	// JournalDir holds the journal while a commit is in flight. The caller holds
	// the lock that keeps Recover and other commits out of it.
	JournalDir string
	// Applied, when set, is called once every change is on the host and the
	// journal says so (a crash from here on is finished by Recover, which
	// reports the trial committed), before the journal is removed. A store
	// records the trial as committed there: a crash at any point then leaves
	// the journal or that record, never neither. An error keeps the journal:
	// Apply returns it, with the changes, and the next Recover reports the
	// commit.
	Applied func() error
	// Hook, when set, is called at every numbered point of the commit; tests
	// kill the process there to prove crash safety.
	Hook func(point int)
	// Log receives debug records; nil logs nothing.
	Log *slog.Logger

	// skipPrehash leaves out the read of every content before the host is
	// touched (benchmarks measure what it costs).
	skipPrehash bool
	// walkDirs resolves the host's directories with walkBeneath (darwin's
	// one-name-at-a-time walk) instead of the platform's way: the Linux
	// tests run the unsafe-path cases through both. Rollback and recovery
	// keep the platform's.
	walkDirs bool
}

// Recovered says what Recover did with one journal.
type Recovered struct {
	Trial string
	// Committed: the commit had applied every step and was finished; false: it
	// was rolled back and the host is as it was before it.
	Committed bool
}
