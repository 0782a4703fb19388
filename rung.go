package dryexec

import (
	"context"
	"io"
)

// Rung is one isolation backend. Everything above it is rung-independent.
type Rung interface {
	// Name is the rung's contract name: host, ns, gvisor, vm, seatbelt.
	Name() string
	// Available reports nil, or an *IsolationUnavailableError naming what is missing.
	Available(ctx context.Context) error
	// Trial runs spec.Action behind the boundary and returns the delta. File
	// contents the delta refers to are written to spec.Blobs before it returns.
	Trial(ctx context.Context, spec TrialSpec) (*StateDelta, error)
}

// BlobSink stores file contents by sha256. A trial writes the new content of every
// created or modified file into it, so that a later commit applies exactly the bytes
// that were reviewed, whatever happens to the sandbox afterwards.
type BlobSink interface {
	// PutBlob stores all of r's bytes and returns their sha256 (hex) and length.
	// A sink that will not keep them (a cap, a quota, a full disk) still reads
	// them all and returns their sha256 and length with a
	// *ContentNotKeptError: the file is then listed without its content.
	PutBlob(r io.Reader) (sha256hex string, n int64, err error)
}

// ExchangeSink keeps the bounded, credential-redacted requests and responses
// (headers and bodies) of a trial's network exchanges, for `dryexec show
// --network`: the delta's Network lists every attempt, the sink keeps what
// was said. records is a JSON array of Exchange.
type ExchangeSink interface {
	PutExchanges(records []byte) error
}

// TrialSpec is one trial's input.
type TrialSpec struct {
	TrialID string
	Action  Action
	// Stdin, when non-nil, is passed to the command; nil means /dev/null.
	Stdin io.Reader
	// OutputCap bounds stdout and stderr each (the tail is kept). 0 means 1 MiB.
	OutputCap int
	// Stdout and Stderr, when not nil, also receive the command's output as it
	// is produced (the daemon streams it to clients). A write error is ignored
	// and the delta still holds the tail; a slow writer slows the command.
	Stdout, Stderr io.Writer
	// UpperSizeBytes bounds what the trial may write (the upper tmpfs). 0 means 2 GiB.
	UpperSizeBytes int64
	// DiffMaxBytes is the largest file for which a unified diff is produced.
	// 0 means 64 KiB; negative means never.
	DiffMaxBytes int64
	// Blobs receives file contents; nil means contents are hashed but not kept.
	Blobs BlobSink
	// Exchanges receives the network exchanges' headers and bodies; nil
	// keeps them nowhere.
	Exchanges ExchangeSink
	// Limits bounds the trial's processes as a whole (zero fields: defaults).
	Limits Limits
	// Masks are extra host paths the sandbox sees empty (absolute, or "~/…");
	// MaskPaths adds DefaultMasks beneath the caller's home unless
	// NoDefaultMasks. Reading one is a {kind: secret} violation.
	Masks          []string
	NoDefaultMasks bool
	// OwnPaths are where the caller keeps dryexec's own state (a daemon's
	// home, state dir and socket; absolute). The ns rung hides each whole —
	// no names, no content, no writes — in every sandbox, together with the
	// default places (DRYEXEC_HOME, the XDG state dir of every home it masks,
	// the runtime socket); NoDefaultMasks does not turn that off
	// (docs/limits.md, "dryexec's own state").
	OwnPaths []string
	// Net says what the sandbox's network reaches: --net specs, each "none",
	// "mock:FILE" or "allow:RULE[,RULE…]" (docs/network.md); combined, mocks
	// answer first, then allow rules, else the traffic is blocked. Empty
	// means none. Every attempt is logged in StateDelta.Network.
	Net []string
	// NetCADir holds netsim's per-install CA; empty means
	// $DRYEXEC_HOME/netsim-ca.
	NetCADir string
	// SpillDir, when set, is a directory where the rung may keep the delta's
	// file changes once they are many (an unlinked file, gone with the
	// process): the delta then holds them as a FileSource (StateDelta.EachFile)
	// rather than in Files, and a million changed paths cost tens of MB
	// instead of hundreds. Empty keeps them all in Files.
	SpillDir string
	// Image, when set, is the sandbox's root filesystem in place of the
	// host's (a rung that is not an ImageRung refuses it: CheckImage). Masks
	// and OwnPaths, which name host paths, do not apply: nothing of the host
	// is in the view.
	Image *ImageRoot
}

// Defaults for TrialSpec's zero values.
const (
	DefaultOutputCap      = 1 << 20
	DefaultUpperSizeBytes = 2 << 30
	DefaultDiffMaxBytes   = 64 << 10
)

// WithDefaults returns s with zero values replaced by the defaults above.
func (s TrialSpec) WithDefaults() TrialSpec {
	if s.OutputCap <= 0 {
		s.OutputCap = DefaultOutputCap
	}
	if s.UpperSizeBytes <= 0 {
		s.UpperSizeBytes = DefaultUpperSizeBytes
	}
	if s.DiffMaxBytes == 0 {
		s.DiffMaxBytes = DefaultDiffMaxBytes
	}
	return s
}
