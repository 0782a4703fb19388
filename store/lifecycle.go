package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/commit"
	"github.com/dryexec/dryexec/policy"
)

// State is where a stored trial is in its life.
type State struct {
	// Status is "pending", "partial", "committed" or "discarded".
	Status string    `json:"status"`
	At     time.Time `json:"at,omitzero"`
	// Paths are what selective commits applied, all of them so far, each a
	// path and everything beneath it (empty: everything). A partial trial's
	// other changes are still to commit or discard (Remaining); a discarded
	// one with Paths was partly committed, the rest discarded.
	Paths []string `json:"paths,omitempty"`
	// Skipped are the paths a commit left out because they cannot be
	// committed (CommitOptions.SkipUncommittable).
	Skipped []dryexec.Uncommittable `json:"skipped,omitempty"`
	// Override is set when a trial decided block was committed because the
	// caller asked (CommitOptions.AllowBlocked).
	Override *Override `json:"override,omitempty"`
}

// Override records a commit of a trial the policy decided block.
type Override struct {
	// By is who asked, as the interface that committed knows them (the CLI:
	// the user and uid; the API and MCP: "api" or "mcp" and the user
	// dryexec runs as, which is not who asked; no caller can set it).
	By string    `json:"by"`
	At time.Time `json:"at"`
	// Decision and Reasons are the policy's, as signed in the trial.
	Decision string   `json:"decision"`
	Reasons  []string `json:"reasons,omitempty"`
}

// Trial statuses.
const (
	StatusPending = "pending"
	// StatusPartial: selective commits applied some of the changes
	// (State.Paths); the rest can still be committed or discarded.
	StatusPartial   = "partial"
	StatusCommitted = "committed"
	StatusDiscarded = "discarded"
)

// covers reports whether the selection sel (a path and everything beneath
// it, as commit.Options.Paths) holds p.
func covers(sel []string, p string) bool {
	for _, s := range sel {
		if p == s || strings.HasPrefix(p, strings.TrimSuffix(s, "/")+"/") {
			return true
		}
	}
	return false
}

// Remaining returns the changes of d that are still to commit in state st:
// all of them while pending, none once committed or discarded, and for a
// partly committed trial every change that no commit so far applied. A
// selective commit applies what its paths select and the trial's mkdirs of
// their parents (package commit); those are not left either.
func Remaining(d *dryexec.StateDelta, st State) ([]dryexec.FileChange, error) {
	switch st.Status {
	case StatusCommitted, StatusDiscarded:
		return nil, nil
	case StatusPartial:
		return without(d, st.Paths)
	}
	var out []dryexec.FileChange
	err := d.EachFile(func(f *dryexec.FileChange) error { out = append(out, *f); return nil })
	return out, err
}

// without is d's changes less those a commit of sel applies: the selected
// ones and the mkdirs of their parents.
func without(d *dryexec.StateDelta, sel []string) ([]dryexec.FileChange, error) {
	parents := map[string]bool{}
	if err := d.EachFile(func(f *dryexec.FileChange) error {
		if covers(sel, f.Path) {
			for a := filepath.Dir(f.Path); a != "/" && a != "." && !parents[a]; a = filepath.Dir(a) {
				parents[a] = true
			}
		}
		return nil
	}); err != nil {
		return nil, err
	}
	var out []dryexec.FileChange
	err := d.EachFile(func(f *dryexec.FileChange) error {
		if !covers(sel, f.Path) && !(f.Op == dryexec.OpMkdir && parents[f.Path]) {
			out = append(out, *f)
		}
		return nil
	})
	return out, err
}

// StateOf returns trial id's state.
func (s *Store) StateOf(id string) (State, error) {
	if _, err := s.Load(id); err != nil {
		return State{}, err
	}
	return s.readState(id), nil
}

func (s *Store) readState(id string) State {
	b, err := os.ReadFile(filepath.Join(s.trialDir(id), "state.json"))
	if err != nil {
		return State{Status: StatusPending}
	}
	var st State
	if json.Unmarshal(b, &st) != nil || st.Status == "" {
		return State{Status: StatusPending}
	}
	return st
}

func (s *Store) writeState(id string, st State) error {
	return writeJSON(filepath.Join(s.trialDir(id), "state.json"), st, true)
}

// JournalDir is where in-flight commits keep their journals.
func (s *Store) JournalDir() string { return filepath.Join(s.dir, "journal") }

// lock takes the store's exclusive lock, which commits and recovery hold.
func (s *Store) lock() (*os.File, error) { return lockFile(filepath.Join(s.dir, "lock"), true) }

// CommitOptions selects what to commit and how.
type CommitOptions struct {
	Paths      []string
	Force      bool
	ForcePaths []string
	// AllowBlocked commits a trial the policy decided block (without it,
	// such a commit is refused with dryexec.ErrBlocked). The override is
	// recorded with the trial (State.Override): By says who asked (empty:
	// the user this process runs as).
	AllowBlocked bool
	By           string
	// SkipUncommittable commits everything but the paths commit cannot write
	// (sockets and device nodes, contents that were not kept), which are
	// otherwise refused with a *dryexec.UncommittableError; the result and
	// the trial's state list them.
	SkipUncommittable bool
	// Hook is passed to commit.Options.Hook (crash tests).
	Hook func(point int)
	// To is the host directory a trial on an image commits onto (MapImage):
	// required for such a trial, refused for any other. Paths then name
	// paths beneath To.
	To string
	// Redecide, when set, judges a trial on an image again once its changes
	// are mapped beneath To: the signed decision saw the image's paths, and
	// To is chosen only now, so a target the policy denies (a To of
	// /etc/cron.d) was never judged. A block it finds is refused and
	// overridden as a signed block is (AllowBlocked, recorded).
	Redecide func(ctx context.Context, mapped *dryexec.StateDelta) dryexec.Decision
}

// CommitResult is what a commit did.
type CommitResult struct {
	Applied []dryexec.FileChange
	// Skipped: left out on request (CommitOptions.SkipUncommittable).
	Skipped []dryexec.Uncommittable
	// Override: the trial was decided block and committed on request.
	Override *Override
	// Outside counts the changes of a trial on an image that were not
	// beneath its workspace, so never committable (MapImage).
	Outside int
}

// Commit is CommitWith, returning the changes applied.
func (s *Store) Commit(ctx context.Context, id string, opt CommitOptions) ([]dryexec.FileChange, error) {
	r, err := s.CommitWith(ctx, id, opt)
	if r == nil {
		return nil, err
	}
	return r.Applied, err
}

// CommitWith applies trial id's changes to the host (see package commit) and
// marks the trial committed. A trial commits once. Before anything on the host
// changes, the stored delta must verify against the install's receipt key
// (else an error matching dryexec.ErrUnverified), every content it will write
// is re-hashed against that signed delta (else a *CorruptError that also
// matches dryexec.ErrUnverified), and a trial decided block needs
// AllowBlocked (else dryexec.ErrBlocked). Every interface commits through
// here.
func (s *Store) CommitWith(ctx context.Context, id string, opt CommitOptions) (*CommitResult, error) {
	l, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer l.Close()
	if _, err := s.recoverLocked(); err != nil {
		return nil, err
	}
	st := s.readState(id)
	switch st.Status {
	case StatusCommitted:
		if _, err := s.loadRaw(id); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %s (at %s)", dryexec.ErrAlreadyCommitted, id, st.At.Format(time.RFC3339))
	case StatusDiscarded:
		if _, err := s.loadRaw(id); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %s", dryexec.ErrDiscarded, id)
	}
	d, err := s.loadSigned(id)
	if err != nil {
		return nil, err
	}
	// Verified as signed, then mapped: a trial on an image commits onto
	// the caller's directory, and only what it changed in its workspace.
	d, outside, err := MapImage(d, opt.To)
	if err != nil {
		return nil, err
	}
	if opt.To != "" && opt.Redecide != nil && d.Decision.Choice != policy.Block {
		// d is MapImage's copy: the signed record keeps its own decision.
		if dec := opt.Redecide(ctx, d); dec.Choice == policy.Block {
			d.Decision = dryexec.Decision{Choice: policy.Block, RiskScore: dec.RiskScore,
				Reasons: append([]string{"decided again for its target " + dryexec.QuotePath(opt.To)}, dec.Reasons...)}
		}
	}
	// What this commit leaves: a partly committed trial commits only what
	// is left of it, a path already committed is said to be so, and the
	// trial stays partial while anything remains.
	sel := st.Paths
	if st.Status == StatusPartial {
		rest, err := without(d, st.Paths)
		if err != nil {
			return nil, err
		}
		for _, p := range opt.Paths {
			if covers(st.Paths, p) || !slices.ContainsFunc(rest, func(f dryexec.FileChange) bool { return covers([]string{p}, f.Path) }) &&
				slices.ContainsFunc(d.Files, func(f dryexec.FileChange) bool { return covers([]string{p}, f.Path) }) {
				return nil, fmt.Errorf("%w: %s at %s (dryexec show %s says what is left)", dryexec.ErrAlreadyCommitted, id, p, id)
			}
		}
		d.SetFileSource(nil)
		d.Files = rest
		// Touched paths (mtime only) under what was committed had their
		// mtimes set then.
		d.Touched = slices.DeleteFunc(slices.Clone(d.Touched), func(t dryexec.FileChange) bool { return covers(st.Paths, t.Path) })
	} else {
		sel = nil
	}
	status, left := StatusCommitted, []dryexec.FileChange(nil)
	if len(opt.Paths) > 0 {
		sel = append(slices.Clone(sel), opt.Paths...)
		if left, err = without(d, opt.Paths); err != nil {
			return nil, err
		}
		if len(left) > 0 {
			status = StatusPartial
		}
	}
	res := &CommitResult{Outside: outside}
	if d.Decision.Choice == policy.Block {
		if !opt.AllowBlocked {
			return nil, fmt.Errorf("%w: %s (%s); committing it anyway needs an explicit override", dryexec.ErrBlocked, id, blockReasons(d))
		}
		by := opt.By
		if by == "" {
			by = ProcessUser()
		}
		res.Override = &Override{By: by, At: time.Now().UTC(), Decision: d.Decision.Choice, Reasons: d.Decision.Reasons}
	}
	// The trial is marked committed before the journal goes (Applied): a
	// crash between the two would otherwise leave the host changed and the
	// trial pending, with nothing left to say it was committed.
	applied, err := commit.Apply(ctx, d, commit.Options{
		Paths: opt.Paths, Force: opt.Force, ForcePaths: opt.ForcePaths, Hook: opt.Hook,
		SkipUncommittable: opt.SkipUncommittable,
		OnSkip:            func(u dryexec.Uncommittable) { res.Skipped = append(res.Skipped, u) },
		JournalDir:        s.JournalDir(),
		Applied: func() error {
			if status == StatusCommitted {
				// Everything is committed now: a first commit records
				// its selection ("only …") as before; the last of several
				// leaves nothing to single out.
				sel = nil
				if st.Status != StatusPartial {
					sel = opt.Paths
				}
			}
			if err := s.writeState(id, State{Status: status, At: time.Now().UTC(), Paths: sel,
				Skipped: append(slices.Clone(st.Skipped), res.Skipped...), Override: firstOverride(st.Override, res.Override)}); err != nil {
				return fmt.Errorf("marking %s committed failed: %w", id, err)
			}
			return nil
		},
		OpenBlob: func(sha string) (io.ReadCloser, error) {
			if len(sha) != 64 || strings.ContainsAny(sha, "/.") {
				return nil, fmt.Errorf("bad content hash %q", sha)
			}
			f, err := os.Open(s.BlobPath(id, sha))
			if errors.Is(err, os.ErrNotExist) {
				return nil, &CorruptError{ID: id, What: "content blob " + sha, Err: fmt.Errorf("%w: %w", dryexec.ErrUnverified, err)}
			}
			return f, err
		},
	})
	if errors.Is(err, commit.ErrContentMismatch) {
		return nil, &CorruptError{ID: id, What: "content blob", Err: fmt.Errorf("%w: %w", dryexec.ErrUnverified, err)}
	}
	if err != nil && applied == nil {
		return nil, err
	}
	res.Applied = applied
	if err == nil {
		// Committed content is on the host: the store keeps only what is
		// left to commit (the delta and its receipt stay, for show and
		// verify). A crash before this is gc's to finish.
		s.dropBlobs(id, left)
	}
	return res, err
}

// firstOverride keeps the first override a trial was committed under.
func firstOverride(a, b *Override) *Override {
	if a != nil {
		return a
	}
	return b
}

// dropBlobs removes trial id's content blobs but those of keep (all of them
// when keep is empty).
func (s *Store) dropBlobs(id string, keep []dryexec.FileChange) {
	dir := filepath.Join(s.trialDir(id), "blobs")
	if len(keep) == 0 {
		os.RemoveAll(dir)
		return
	}
	want := map[string]bool{}
	for _, f := range keep {
		want[f.SHA256] = true
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !want[e.Name()] {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// blockReasons is the policy's reasons for a block, for the refusal.
func blockReasons(d *dryexec.StateDelta) string {
	if len(d.Decision.Reasons) == 0 {
		return "decided block"
	}
	return "decided block: " + strings.Join(d.Decision.Reasons, "; ")
}

// ProcessUser names the user this process runs as: "name (uid N)".
func ProcessUser() string {
	uid := os.Getuid()
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return fmt.Sprintf("%s (uid %d)", u.Username, uid)
	}
	return fmt.Sprintf("uid %d", uid)
}

// Recover finishes or rolls back commits a crash interrupted. Call it before
// committing from the store. It touches nothing outside the store and its
// journal: killing what a crashed sandbox left running is runner.Recover's.
func (s *Store) Recover() ([]commit.Recovered, error) {
	l, err := s.lock()
	if err != nil {
		return nil, err
	}
	defer l.Close()
	return s.recoverLocked()
}

func (s *Store) recoverLocked() ([]commit.Recovered, error) {
	rec, err := commit.Recover(s.JournalDir())
	for _, r := range rec {
		if r.Committed && s.readState(r.Trial).Status != StatusCommitted {
			s.writeState(r.Trial, State{Status: StatusCommitted, At: time.Now().UTC()})
		}
	}
	return rec, err
}

// Sweep removes expired trials, trials a killed `run` left half-recorded, and
// leftovers of interrupted discards. It returns how many it removed.
func (s *Store) Sweep() (int, error) { return s.sweep(true) }

// sweep is Sweep; without expired it leaves expired trials alone, which
// spares a stat of every stored trial (Load refuses expired ones anyway).
//
// It runs at every command, over a directory of thousands of trials: the
// names are read unsorted, and a stored trial's costs no more than its name
// unless expired trials are looked for.
func (s *Store) sweep(expired bool) (int, error) {
	names, err := readNames(filepath.Join(s.dir, "trials"))
	if err != nil {
		return 0, fmt.Errorf("store: %w", err)
	}
	return s.sweepNames(names, expired), nil
}

// sweepNames is sweep over names, the trials directory as listed.
func (s *Store) sweepNames(names []string, expired bool) int {
	n := 0
	now := time.Now()
	for _, name := range names {
		id, suffix, _ := strings.Cut(name, ".")
		if (suffix == "" && !expired) || !ValidID(id) {
			continue
		}
		p := filepath.Join(s.dir, "trials", name)
		switch suffix {
		case "partial", "spare":
			// Still being recorded, or a spare kept ready (spare.go), if
			// its lock (an flock on the dir) is held.
			l, err := lockDir(p)
			if err != nil {
				continue
			}
			os.RemoveAll(p)
			l.Close()
			n++
		case "discarded":
			os.RemoveAll(p)
			n++
		case "":
			if !expired {
				continue
			}
			info, err := os.Stat(filepath.Join(p, "delta.json"))
			if err != nil || now.Sub(info.ModTime()) > s.ttl {
				os.RemoveAll(p)
				n++
			}
		}
	}
	return n
}

// gcEvery is how often GCDue runs GC at most.
const gcEvery = 10 * time.Minute

// readNames returns the names in dir, in the directory's order.
func readNames(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Readdirnames(-1)
}

// GCDue is GC (unmeasured) when it was last done a while ago (ten
// minutes, or a tenth of the TTL when that is shorter; a stamp file in the
// store records it), else nothing. Why: GC stats every stored trial, and
// the CLI, which starts once per trial, ran a full sweep each time — with a
// few hundred trials kept, milliseconds of a trial that takes twenty; with
// the thousands a day of agent runs keeps, tens to hundreds of
// milliseconds (BenchmarkGCDue), so not more often than that. An expired
// trial it has not removed yet is gone all the same: Load refuses it. The
// CLI calls it after a command's output, having swept what crashes left
// when it opened the store (SweepLeftovers), which a second time would
// only repeat.
func (s *Store) GCDue() (int, error) {
	every := min(gcEvery, s.ttl/10)
	stamp := filepath.Join(s.dir, "swept")
	if st, err := os.Stat(stamp); err == nil {
		if age := time.Since(st.ModTime()); age >= 0 && age < every {
			return 0, nil
		}
	}
	r, err := s.gc(false)
	if err != nil {
		return r.Removed, err
	}
	now := time.Now()
	if err := os.Chtimes(stamp, now, now); errors.Is(err, os.ErrNotExist) {
		if f, err := os.OpenFile(stamp, os.O_CREATE|os.O_WRONLY, 0o600); err == nil {
			f.Close()
		}
	}
	return r.Removed, nil
}

// Discard drops trial id's contents and remembers that it was discarded (until
// it expires), so that a later commit or discard says so clearly.
func (s *Store) Discard(id string) error {
	l, err := s.lock()
	if err != nil {
		return err
	}
	defer l.Close()
	if _, err := s.Load(id); errors.Is(err, ErrCorrupt) {
		// Nothing of it can be trusted, its status included: the whole
		// trial goes (renamed first, so that an interrupted removal is
		// Sweep's to finish).
		gone := s.trialDir(id) + ".discarded"
		if err := os.Rename(s.trialDir(id), gone); err != nil {
			return fmt.Errorf("store: removing corrupt trial %s: %w", id, err)
		}
		return os.RemoveAll(gone)
	} else if err != nil {
		return err
	}
	st := s.readState(id)
	switch st.Status {
	case StatusCommitted:
		return fmt.Errorf("%w: %s", dryexec.ErrAlreadyCommitted, id)
	case StatusDiscarded:
		return fmt.Errorf("%w: %s", dryexec.ErrDiscarded, id)
	}
	// A partly committed trial keeps the record of what was committed
	// (Paths); the rest is what is discarded.
	if err := s.writeState(id, State{Status: StatusDiscarded, At: time.Now().UTC(), Paths: st.Paths,
		Skipped: st.Skipped, Override: st.Override}); err != nil {
		return err
	}
	return os.RemoveAll(filepath.Join(s.trialDir(id), "blobs"))
}
