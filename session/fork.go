package session

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/compare"
	"github.com/dryexec/dryexec/wire"
)

// MaxForkBranches bounds one Fork call: each branch is a sandbox of its own.
const MaxForkBranches = 16

// ErrForkUnsupported: the session's rung cannot fork sessions (see
// *ForkUnsupportedError).
var ErrForkUnsupported = errors.New("fork unsupported")

// ErrForkBusy: the ns rung refused to freeze the workspace because a process
// of the session holds a workspace file open for writing (it could write on
// into the layer the branches share). Nothing changed; end or await that
// process and fork again.
var ErrForkBusy = errors.New("fork refused: a workspace file is open for writing")

// ErrNoOrigin: DiffOrigin of a session that is not a branch (or whose tree
// was replaced since its fork).
var ErrNoOrigin = errors.New("no origin: the session is not a fork (or its tree was replaced since)")

// ErrNotBranch: Keep or DiffOrigin was given a session that is not a live
// branch of this one.
var ErrNotBranch = errors.New("not a branch of this session")

// ForkUnsupportedError names the rung whose sandboxes cannot be forked.
type ForkUnsupportedError struct{ Rung string }

func (e *ForkUnsupportedError) Error() string {
	return fmt.Sprintf("session: the %s rung cannot fork a session (yet): open a new session and push the tree instead", e.Rung)
}

// Is makes errors.Is(err, ErrForkUnsupported) true.
func (e *ForkUnsupportedError) Is(target error) bool { return target == ErrForkUnsupported }

// forker is the rung side of Fork.
type forker = dryexec.SandboxForker[wire.SessionStart, wire.Fork, wire.Forked, wire.ForkAdopt]

// forkState is a session's part in forks.
type forkState struct {
	mu sync.Mutex // one fork, keep or discard at a time; guards the fields
	// parent is the session this one was forked from (nil: none), group
	// the branches made with it by the same Fork call, this one included.
	parent *Session
	group  *[]*Session
	// kept says Keep took this branch's changes; discarded, that Keep took
	// a sibling's or Discard ended it.
	kept, discarded bool
	// pause is how long the last fork held the session (its guest's fork
	// call: the freeze, or the host rung's copy).
	pause time.Duration
	// family is the warm pool this session shares with its fork family
	// (nil: it never forked and is no branch, or its rung opens no branch
	// ahead).
	family *family
	// in takes the trees the guest streams during a fork (gvisor).
	in forkInbox
}

// MaxForkStream bounds what a gvisor session's guest may stream to the
// host in one fork (its workspace and baseline, as tar): it is held in the
// host's memory until every branch has it.
const MaxForkStream = 1 << 30

// ErrForkTooLarge: a gvisor session's workspace and baseline together are
// more than MaxForkStream.
var ErrForkTooLarge = errors.New("fork: the workspace and its baseline are too large to stream")

// forkInbox collects the fork.data calls of a streaming fork (the gvisor
// rung's: Fork.Stream). It has a lock of its own: the guest's calls are
// served while Fork, holding forkState.mu, waits for its fork call.
type forkInbox struct {
	mu     sync.Mutex // guards the fields
	open   bool
	chunks [][]byte
	size   int64
	limit  int64 // MaxForkStream (a test's own, smaller)
	over   bool  // the guest sent more than limit
}

func (in *forkInbox) start() {
	in.mu.Lock()
	in.open, in.chunks, in.size, in.over, in.limit = true, nil, 0, false, MaxForkStream
	in.mu.Unlock()
}

// stop closes the inbox and returns what it took, and whether the guest
// sent too much (it took nothing then).
func (in *forkInbox) stop() ([][]byte, int64, bool) {
	in.mu.Lock()
	defer in.mu.Unlock()
	c, n, over := in.chunks, in.size, in.over
	in.open, in.chunks, in.size, in.over = false, nil, 0, false
	return c, n, over
}

// add serves one fork.data call: refused outside a fork, or past
// MaxForkStream.
func (in *forkInbox) add(bin [][]byte) (any, [][]byte, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if !in.open {
		return nil, nil, remoteErr("no_fork", "%s outside a fork", wire.VerbForkData)
	}
	for _, b := range bin {
		if in.size+int64(len(b)) > in.limit {
			in.open, in.chunks, in.size, in.over = false, nil, 0, true
			return nil, nil, remoteErr("too_large", "%v: more than %d bytes", ErrForkTooLarge, in.limit)
		}
		in.chunks = append(in.chunks, b)
		in.size += int64(len(b))
	}
	return nil, nil, nil
}

// chunkReader reads chunks one after the other.
func chunkReader(chunks [][]byte) io.Reader {
	rs := make([]io.Reader, len(chunks))
	for i, c := range chunks {
		rs[i] = bytes.NewReader(c)
	}
	return io.MultiReader(rs...)
}

// Fork starts n new sessions (branches) from this one's state at the call:
//
//   - the workspace exactly: on the ns rung the upper is frozen as a
//     read-only layer that this session and every branch then share, each
//     with a fresh upper of its own, so a fork copies no file however large
//     the tree; on the host rung (no isolation) the workspace is copied
//     (reflinked where the filesystem can); a gvisor session on the host's
//     view forks by memory (runsc checkpoint and restore, as a vm session
//     does by its VM's snapshot: running processes carry on in each
//     branch), a gvisor session on an image streams the workspace and its
//     baseline to the host (at most MaxForkStream), which pushes them into
//     each branch;
//   - the shell's cwd and exported environment, and the cache;
//   - not the Python interpreter: each exec_python starts a fresh one on
//     every rung, so there is no interpreter state to carry.
//
// Each branch is a sandbox of its own, opened with this session's options:
// its own limits (cgroup), network (netsim and its log) and masks. A
// branch's Diff is against the fork point; DiffOrigin against this session's
// baseline as it was at the fork. This session keeps running, its own
// baseline unchanged.
//
// On the ns and gvisor rungs every process of the session is stopped
// (SIGSTOP) for the instant of the freeze (gvisor: the stream) and continued
// after; on ns the freeze is refused (the
// session unchanged) while a process holds a workspace file open for
// writing, which could otherwise write on into the shared layer. On the host
// rung nothing is stopped: a process left running in the background may
// write while the tree is copied.
//
// A rung whose sandboxes cannot fork returns a *ForkUnsupportedError.
func (s *Session) Fork(ctx context.Context, n int) ([]*Session, error) {
	if n < 1 || n > MaxForkBranches {
		return nil, fmt.Errorf("session: fork: %d branches: want 1 to %d", n, MaxForkBranches)
	}
	if sn, ok := s.sb.(snapshotter); ok {
		s.fork.mu.Lock()
		defer s.fork.mu.Unlock()
		if s.fork.discarded {
			return nil, fmt.Errorf("%w: fork: the branch was discarded", dryexec.ErrSessionLost)
		}
		return s.forkMemory(ctx, n, sn)
	}
	fk, ok := s.sb.(forker)
	if !ok {
		return nil, &ForkUnsupportedError{Rung: s.opt.Rung}
	}
	s.fork.mu.Lock()
	defer s.fork.mu.Unlock()
	if s.fork.discarded {
		return nil, fmt.Errorf("%w: fork: the branch was discarded", dryexec.ErrSessionLost)
	}
	var req wire.Fork
	if err := fk.PrepareFork(n, &req); err != nil {
		return nil, fmt.Errorf("session: fork: %w", err)
	}
	defer fk.DropFork()
	if req.Stream {
		s.fork.in.start()
	}
	start := time.Now()
	f, err := s.call(ctx, wire.VerbFork, &req)
	s.fork.pause = time.Since(start)
	chunks, size, over := s.fork.in.stop()
	if over {
		return nil, fmt.Errorf("session: %w (more than %d bytes)", ErrForkTooLarge, MaxForkStream)
	}
	if re := (*wire.RemoteError)(nil); errors.As(err, &re) && re.Code == "fork_busy" {
		return nil, fmt.Errorf("session: %w: %v", ErrForkBusy, err)
	}
	if err != nil {
		return nil, err
	}
	var forked wire.Forked
	if err := f.Decode(&forked); err != nil {
		return nil, err
	}
	if req.Stream && (size != forked.StreamBytes || forked.TreeBytes < 0 || forked.TreeBytes > size) {
		return nil, fmt.Errorf("%w: fork: the guest streamed %d bytes of trees and said %d (workspace %d)", dryexec.ErrGuest, size, forked.StreamBytes, forked.TreeBytes)
	}
	group := new([]*Session)
	fail := func(err error) ([]*Session, error) {
		for _, b := range *group {
			b.Close()
		}
		return nil, err
	}
	hostObjects := s.bound()
	ad, warm := s.sb.(adopter)
	var pool *Pool
	if warm {
		// The first fork's branches open now, cold; the pool, made after
		// them, does not compete with them for the CPUs.
		if s.fork.family == nil {
			s.fork.family = &family{refs: 1}
		}
		pool = s.readyPool()
		defer s.growPool(ctx, n)
	}
	for i := range n {
		adopt := wire.ForkAdopt{Cwd: forked.Cwd, Env: forked.Env, From: forked.Workspace}
		var b *Session
		if warm {
			// A session opened ahead (or now, when none is ready), handed
			// the layers.
			if b, err = s.openBranch(ctx, pool); err != nil {
				return fail(err)
			}
			*group = append(*group, b)
			if err := ad.AdoptFork(b.sb, &forked, i, &adopt); err != nil {
				return fail(err)
			}
		} else {
			sb, err := fk.OpenFork(ctx, sandboxSpec(s.opt), &forked, i, &adopt)
			if err != nil {
				return fail(err)
			}
			if b, err = startSession(ctx, s.opt, sb); err != nil {
				return fail(err)
			}
			*group = append(*group, b)
		}
		if req.Stream {
			// The parent's trees, then the adopt that takes them.
			adopt.TreeBytes = forked.TreeBytes
			err = b.pushStream(ctx, chunkReader(chunks), wire.VerbForkAdopt, &adopt)
		} else {
			_, err = b.call(ctx, wire.VerbForkAdopt, &adopt)
		}
		if err != nil {
			return fail(err)
		}
		b.cache = s.cache.clone()
		s.emitMu.Lock()
		onEmit := s.onEmit
		s.emitMu.Unlock()
		b.bind(hostObjects, onEmit)
		s.bindMu.Lock()
		globals := s.hostGlobals
		s.bindMu.Unlock()
		b.bindMu.Lock()
		b.hostGlobals = globals
		b.bindMu.Unlock()
		b.fork.parent, b.fork.group = s, group
		if warm {
			s.fork.family.hold()
			b.fork.family = s.fork.family
		}
	}
	return slices.Clone(*group), nil
}

// adopter is a forker whose branches can be sessions opened ahead of the
// fork (the ns rung's): AdoptFork hands an open sandbox branch i's share of
// the frozen workspace, and fills what its guest is told at fork.adopt.
type adopter interface {
	AdoptFork(into dryexec.Sandbox[wire.SessionStart], forked *wire.Forked, i int, adopt *wire.ForkAdopt) error
}

// family is what a session that forked and all the branches descended from
// it share (they have the same options): a pool of sessions opened ahead of
// their forks, so that a fork costs the freeze and the branch's adopt, not
// a sandbox's start. It is made at the family's first fork, which is cold,
// sized to the largest fork so far, refilled in the background after each
// fork (package warm: idle sessions go after its idle timeout), and closed
// with the last session of the family.
type family struct {
	mu   sync.Mutex // guards the fields
	pool *Pool      // nil: none made (a session with an image root never makes one)
	size int
	refs int
}

// readyPool is the pool s's branches come from (nil: none yet; s.fork.mu
// held).
func (s *Session) readyPool() *Pool {
	f := s.fork.family
	if f == nil {
		return nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pool
}

// growPool makes the family's pool, or a larger one, for forks of n (s.fork.mu held).
func (s *Session) growPool(ctx context.Context, n int) {
	f := s.fork.family
	if s.opt.Image != nil {
		// A pool serves no session with an image root (sameOptions).
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.refs > 0 && (f.pool == nil || n > f.size) {
		old := f.pool
		// The pool outlives this call: it ends with the family.
		f.pool = NewPool(context.WithoutCancel(ctx), PoolOptions{Size: n, Template: s.opt})
		f.size = n
		if old != nil {
			old.Close()
		}
	}
}

// openBranch is a session for a branch of s: pool's, or opened now.
func (s *Session) openBranch(ctx context.Context, pool *Pool) (*Session, error) {
	if pool == nil {
		return open(ctx, s.opt)
	}
	return pool.take(ctx, s.opt)
}

func (f *family) hold() {
	f.mu.Lock()
	f.refs++
	f.mu.Unlock()
}

// release drops one session's hold; the last one closes the pool.
func (f *family) release() {
	if f == nil {
		return
	}
	f.mu.Lock()
	f.refs--
	var p *Pool
	if f.refs == 0 {
		p, f.pool = f.pool, nil
	}
	f.mu.Unlock()
	if p != nil {
		p.Close()
	}
}

// bound is the host objects the session has now.
func (s *Session) bound() map[string]*hostObject {
	s.bindMu.Lock()
	defer s.bindMu.Unlock()
	return s.hostObjects
}

// ForkPause is how long the last Fork held this session: its guest's part
// (the ns rung's freeze, the host rung's copy), not the branches' start.
func (s *Session) ForkPause() time.Duration {
	s.fork.mu.Lock()
	defer s.fork.mu.Unlock()
	return s.fork.pause
}

// Parent is the session this one was forked from, or nil.
func (s *Session) Parent() *Session {
	s.fork.mu.Lock()
	defer s.fork.mu.Unlock()
	return s.fork.parent
}

// DiffOrigin is the workspace's changes since the origin: the baseline its
// parent had when this session was forked from it (Diff is since the fork
// point). A session that is not a branch, or whose tree was replaced since
// (PushTar), has none: an error.
func (s *Session) DiffOrigin(ctx context.Context) (*Diff, error) {
	d, err := s.pullDiff(ctx, wire.VerbPullOriginDiff, nil)
	if re := (*wire.RemoteError)(nil); errors.As(err, &re) && re.Code == "no_origin" {
		return nil, fmt.Errorf("session: %w", ErrNoOrigin)
	}
	return d, err
}

// Keep makes branch b's changes since the fork point this session's, and
// discards b and every other branch of the same Fork call: their sandboxes
// close, leaving no layer, mount or process of theirs. The changes are
// written over this session's workspace as it is now: a path this session
// itself changed since the fork takes b's version where b changed it too,
// and keeps its own elsewhere. b's cache becomes this session's. This
// session's baseline does not move: its Diff then shows b's changes (and
// its own), ready to be committed to the host as any session diff is.
func (s *Session) Keep(ctx context.Context, b *Session) error {
	if b == nil || b == s {
		return ErrNotBranch
	}
	b.fork.mu.Lock()
	ok := b.fork.parent == s && !b.fork.discarded
	group := b.fork.group
	b.fork.mu.Unlock()
	if !ok {
		return fmt.Errorf("session: keep: %w", ErrNotBranch)
	}
	s.fork.mu.Lock()
	defer s.fork.mu.Unlock()
	d, err := b.Diff(ctx, false)
	if err != nil {
		return fmt.Errorf("session: keep: the branch's diff: %w", err)
	}
	if err := s.apply(ctx, d); err != nil {
		return fmt.Errorf("session: keep: %w", err)
	}
	s.cache.replaceWith(b.cache)
	b.fork.mu.Lock()
	b.fork.kept = true
	b.fork.mu.Unlock()
	for _, o := range *group {
		o.discard()
	}
	return nil
}

// Discard ends branch b without taking anything from it: as Close, for a
// branch.
func (s *Session) Discard(b *Session) error {
	if b == nil || b.Parent() != s {
		return fmt.Errorf("session: discard: %w", ErrNotBranch)
	}
	b.discard()
	return nil
}

func (s *Session) discard() {
	s.fork.mu.Lock()
	s.fork.discarded = true
	s.fork.mu.Unlock()
	s.Close()
}

// Kept says whether a parent's Keep took this branch.
func (s *Session) Kept() bool {
	s.fork.mu.Lock()
	defer s.fork.mu.Unlock()
	return s.fork.kept
}

// apply writes d over the workspace: its deletes, then its files and
// symlinks (a tar stream, as a push), then its modes.
func (s *Session) apply(ctx context.Context, d *Diff) error {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, p := range slices.Sorted(maps.Keys(d.Writes)) {
		h := &tar.Header{Name: p, Typeflag: tar.TypeReg, Mode: int64(d.Modes[p].Perm()), Size: int64(len(d.Writes[p]))}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(d.Writes[p]); err != nil {
			return err
		}
	}
	for _, p := range slices.Sorted(maps.Keys(d.Links)) {
		if err := tw.WriteHeader(&tar.Header{Name: p, Typeflag: tar.TypeSymlink, Linkname: d.Links[p], Mode: 0o777}); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	end := wire.ApplyEnd{Deletes: d.Deletes, Modes: []wire.DiffMode{}}
	for _, p := range slices.Sorted(maps.Keys(d.Modes)) {
		if _, w := d.Writes[p]; w {
			continue
		}
		if _, l := d.Links[p]; l {
			continue
		}
		end.Modes = append(end.Modes, wire.DiffMode{Path: p, Mode: uint32(d.Modes[p].Perm())})
	}
	if end.Deletes == nil {
		end.Deletes = []string{}
	}
	return s.pushStream(ctx, &buf, wire.VerbApplyEnd, &end)
}

// clone is a copy of c for a branch: stored values are never modified, so
// the two share them.
func (c *Cache) clone() *Cache {
	c.mu.Lock()
	defer c.mu.Unlock()
	return &Cache{readOnly: c.readOnly, gen: c.gen, m: maps.Clone(c.m), size: c.size}
}

// replaceWith makes c's content o's (keep).
func (c *Cache) replaceWith(o *Cache) {
	o.mu.Lock()
	m, size := maps.Clone(o.m), o.size
	o.mu.Unlock()
	c.mu.Lock()
	defer c.mu.Unlock()
	// Generations only grow: a value the guest fetched in part must not
	// match a new one under the same generation.
	for k, e := range m {
		c.gen++
		e.gen = c.gen
		m[k] = e
	}
	c.m, c.size = m, size
}

// Discarded says whether the branch was discarded (by Discard, or by its
// parent's Keep of a sibling).
func (s *Session) Discarded() bool {
	s.fork.mu.Lock()
	defer s.fork.mu.Unlock()
	return s.fork.discarded
}

// State is a branch's state for a comparison: "kept", "discarded" or
// "open".
func (s *Session) State() string {
	s.fork.mu.Lock()
	defer s.fork.mu.Unlock()
	switch {
	case s.fork.kept:
		return "kept"
	case s.fork.discarded:
		return "discarded"
	}
	return "open"
}

// Changes is d as compare sees it: what was done to each path.
func (d *Diff) Changes() map[string]compare.Change {
	out := map[string]compare.Change{}
	mode := func(p string) string { return fmt.Sprintf("%04o", uint32(d.Modes[p].Perm())) }
	for _, p := range d.Deletes {
		out[p] = compare.Change{Op: "delete"}
	}
	for p, m := range d.Modes {
		out[p] = compare.Change{Op: "chmod", Mode: fmt.Sprintf("%04o", uint32(m.Perm()))}
	}
	for p, b := range d.Writes {
		sum := sha256.Sum256(b)
		out[p] = compare.Change{Op: "write", SHA256: hex.EncodeToString(sum[:]), Size: int64(len(b)), Mode: mode(p)}
	}
	for p, l := range d.Links {
		out[p] = compare.Change{Op: "symlink", Link: l}
	}
	return out
}

// Compare diffs each session (against its baseline: a branch's fork point)
// and compares them side by side; names are their ids, in the same order.
func Compare(ctx context.Context, names []string, ss ...*Session) (*compare.Result, error) {
	if len(names) != len(ss) {
		return nil, fmt.Errorf("session: compare: %d names for %d sessions", len(names), len(ss))
	}
	var sides []compare.Side
	for i, s := range ss {
		d, err := s.Diff(ctx, false)
		if err != nil {
			return nil, fmt.Errorf("session: compare: %s: %w", names[i], err)
		}
		sides = append(sides, compare.Side{Name: names[i], Decision: s.State(), Changes: d.Changes()})
	}
	return compare.Compare(sides...), nil
}
