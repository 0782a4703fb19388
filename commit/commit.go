//go:build linux || darwin

package commit

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/fswalk"
)

// Apply commits the selected changes of d to the host, or changes nothing and
// returns an error (a *dryexec.CommitConflictError when the host moved on).
func Apply(ctx context.Context, d *dryexec.StateDelta, opt Options) ([]dryexec.FileChange, error) {
	changes, touched, err := selectChanges(d, opt.Paths)
	if err != nil {
		return nil, err
	}
	if changes, err = refuseUncommittable(d.TrialID, changes, opt); err != nil {
		return nil, err
	}
	pl, err := makePlan(d.TrialID, changes)
	if err != nil {
		return nil, err
	}
	pl.touched = touched
	if err := pl.check(d.TrialID, opt); err != nil {
		return nil, err
	}
	a := &applier{opt: opt, j: &journal{Trial: d.TrialID, State: statePlanned, Steps: pl.steps}, dirs: newDirsFor(opt),
		touched: map[*step]bool{}}
	defer a.closeDirs()
	if !opt.skipPrehash {
		if err := a.prehash(ctx); err != nil {
			return nil, err
		}
	}
	if err := a.run(ctx); err != nil {
		if rerr := a.rollback(); rerr != nil {
			return nil, fmt.Errorf("%w (and rolling back failed: %v; the journal stays for the next start)", err, rerr)
		}
		return nil, err
	}
	if err := a.forgetJournal(); err != nil {
		return pl.changes, err
	}
	return pl.changes, nil
}

// check compares the host with what the trial started from, before anything is
// touched, and collects every conflict. A forced conflict adapts the plan to
// the host as it is now, so that the commit reaches the trial's state from
// there; a few cannot be forced and stay conflicts.
func (pl *plan) check(trialID string, opt Options) error {
	var conflicts []dryexec.Conflict
	forced := func(p string) bool {
		if opt.Force {
			return true
		}
		for _, f := range opt.ForcePaths {
			if p == f || strings.HasPrefix(p, strings.TrimSuffix(f, "/")+"/") {
				return true
			}
		}
		return false
	}
	dirs := newDirsFor(opt)
	defer dirs.close()
	// A forced mkdir where the host has a directory now keeps that directory;
	// what the trial made in it is then checked against the host like any
	// other path. Shallowest first, so a kept dir's new subdirs are seen.
	var mkdirs []string
	for p := range pl.created {
		if pl.first[p].Op == dryexec.OpMkdir && forced(p) {
			mkdirs = append(mkdirs, p)
		}
	}
	slices.SortFunc(mkdirs, func(a, b string) int { return cmp.Or(depth(a)-depth(b), strings.Compare(a, b)) })
	fixes := map[string]verdict{}     // forced conflicts, by path
	hostModes := map[string]verdict{} // the modes (and owners) chmods change now
	for _, p := range mkdirs {
		v, err := pl.checkOne(p, dirs)
		if err != nil {
			return err
		}
		if v.fix == fixDirThere && !v.unsafe {
			delete(pl.created, p)
			clear(pl.anc) // what it said about p and beneath is stale
			fixes[p] = v
		}
	}
	paths := make([]string, 0, len(pl.first))
	for p := range pl.first {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, p := range paths {
		v, err := pl.checkOne(p, dirs)
		if err != nil {
			return err
		}
		if v.exists && pl.first[p].Op == dryexec.OpChmod {
			hostModes[p] = v
		}
		if v.reason == "" {
			continue
		}
		if v.unsafe {
			return fmt.Errorf("%w: %s: %s; nothing was changed", dryexec.ErrUnsafePath, dryexec.QuotePath(p), v.reason)
		}
		switch {
		case !forced(p):
			conflicts = append(conflicts, dryexec.Conflict{Path: p, Reason: v.reason})
		case v.fix == fixNever:
			conflicts = append(conflicts, dryexec.Conflict{Path: p, Reason: v.reason + " (force cannot override this)"})
		default:
			fixes[p] = v
		}
	}
	tconflicts, touches, err := pl.checkTouches(dirs, forced)
	if err != nil {
		return err
	}
	conflicts = append(conflicts, tconflicts...)
	if len(conflicts) > 0 {
		return &dryexec.CommitConflictError{TrialID: trialID, Conflicts: conflicts}
	}
	pl.adapt(fixes, hostModes)
	return pl.addTouchSteps(dirs, touches)
}

// forceFix says how forcing a conflict adapts the plan.
type forceFix int

const (
	fixAsPlanned forceFix = iota // content, mode, link target or extra entries differ: apply as planned
	fixNever                     // the trial's state cannot be reached from the host's: never forced
	fixGone                      // the host has nothing there: drop a removal, make a modify a create
	fixOccupied                  // the host has a file or symlink where the trial created one: replace it
	fixDirThere                  // the host has a directory where the trial made one: keep it, set its mode
)

// verdict is what checkOne found at one path.
type verdict struct {
	reason   string // "" when the host is as the trial started from
	unsafe   bool   // the way to the path leads through a symlink or a non-directory
	fix      forceFix
	exists   bool   // the host has something at the path
	mode     uint32 // and its permission bits
	uid, gid int    // and its owner
}

// adapt fits the plan to the host as check found it: fixes holds the forced
// conflicts, hostModes the modes the chmods change, which rollback restores
// (a forced commit may find other modes than the trial started from).
func (pl *plan) adapt(fixes map[string]verdict, hostModes map[string]verdict) {
	if len(fixes) == 0 && len(hostModes) == 0 {
		return
	}
	out := pl.steps[:0]
	var modes []step
	for _, s := range pl.steps {
		v, forced := fixes[s.Path]
		switch {
		case s.Kind == stepChmod:
			if h, ok := hostModes[s.Path]; ok {
				s.OldMode, s.OldUID, s.OldGID = h.mode, h.uid, h.gid
			}
		case !forced:
		case v.fix == fixGone && s.Kind == stepRemove:
			continue // already gone
		case v.fix == fixGone && s.Kind == stepPlace:
			s.Replace = false
		case v.fix == fixOccupied && s.Kind == stepPlace:
			s.Replace = true // the host's entry ends up in Temp, deleted once applied
		case v.fix == fixDirThere && s.Kind == stepMkdir:
			// The host's dir stays; its mode is set with the other mode
			// changes, after the contents, as a chmod that rollback undoes.
			modes = append(modes, step{Kind: stepChmod, Path: s.Path, Mode: s.Mode, OldMode: v.mode})
			continue
		}
		if s.Kind == stepPlace && s.InNewDir && !pl.created[path.Dir(s.Path)] {
			s.InNewDir = false // in a kept dir: staged with the others, its inode journaled
		}
		out = append(out, s)
	}
	pl.steps = append(out, modes...)
}

// checkOne says how the host's state at p differs from what the trial started
// from.
func (pl *plan) checkOne(p string, dirs *dirs) (verdict, error) {
	f := pl.first[p]
	parent := parentDir(p)
	creates := f.Op == dryexec.OpCreate || f.Op == dryexec.OpMkdir || f.Op == dryexec.OpSymlink
	// Beneath a directory this commit creates, the host's state does not matter:
	// that directory's own check (its parent opened without symlinks, its old
	// occupant verified) covers the way there.
	// (A removal beneath a directory that is removed and made again is of what
	// the old one held, checked as usual.)
	switch anc := pl.ancestors(parent); {
	case anc.created && creates:
		return verdict{}, nil
	case anc.createdNotFresh && !creates:
		return verdict{reason: "it is beneath a directory the trial created", fix: fixNever}, nil
	}
	dfd, err := dirs.open(parent)
	switch {
	case unsafeErr(err):
		return verdict{reason: "a parent directory is a symlink or not a directory", unsafe: true, fix: fixNever}, nil
	case errors.Is(err, unix.ENOENT):
		v := verdict{reason: "parent directory " + dryexec.QuotePath(parent) + " is missing", fix: fixNever}
		if f.Op == dryexec.OpDelete || f.Op == dryexec.OpRmdir {
			v.fix = fixGone
		}
		return v, nil
	case err != nil:
		return verdict{}, fmt.Errorf("commit: opening %s: %w", dryexec.QuotePath(parent), err)
	}
	var st unix.Stat_t
	serr := unix.Fstatat(dfd, path.Base(p), &st, unix.AT_SYMLINK_NOFOLLOW)
	if serr != nil && !errors.Is(serr, unix.ENOENT) {
		return verdict{}, fmt.Errorf("commit: stat %s: %w", dryexec.QuotePath(p), serr)
	}
	v := verdict{exists: serr == nil, mode: uint32(st.Mode) & 0o7777, uid: int(st.Uid), gid: int(st.Gid)}
	kind := kindOf(st.Mode)
	if creates {
		if v.exists {
			v.reason = "the trial created it, but the host has it now"
			switch {
			case f.Op == dryexec.OpMkdir && kind == dryexec.KindDir:
				v.fix = fixDirThere
			case f.Op != dryexec.OpMkdir && kind != dryexec.KindDir:
				v.fix = fixOccupied
			default:
				v.reason, v.fix = fmt.Sprintf("the trial created a %s, but the host has a %s there now", f.Kind, kind), fixNever
			}
		}
		return v, nil
	}
	if !v.exists {
		v.reason, v.fix = "the host no longer has it", fixGone
		if f.Op == dryexec.OpChmod {
			v.fix = fixNever
		}
		return v, nil
	}
	if kind != f.Kind {
		v.reason, v.fix = fmt.Sprintf("it was a %s, the host has a %s now", f.Kind, kind), fixNever
		return v, nil
	}
	wantMode := f.Mode
	if f.Op == dryexec.OpModify || f.Op == dryexec.OpChmod {
		wantMode = f.BeforeMode
	}
	if kind != dryexec.KindSymlink && wantMode != "" && parseMode(wantMode) != v.mode {
		v.reason = fmt.Sprintf("mode is %04o, the trial started from %s", v.mode, wantMode)
		return v, nil
	}
	if f.BeforeUID != nil && f.BeforeGID != nil && (v.uid != *f.BeforeUID || v.gid != *f.BeforeGID) {
		v.reason = fmt.Sprintf("owner is %d:%d, the trial started from %d:%d", v.uid, v.gid, *f.BeforeUID, *f.BeforeGID)
		return v, nil
	}
	switch kind {
	case dryexec.KindFile:
		if f.BeforeSHA256 != "" {
			sum, err := hashAt(dfd, path.Base(p))
			if err != nil {
				return verdict{}, fmt.Errorf("commit: reading %s: %w", dryexec.QuotePath(p), err)
			}
			if sum != f.BeforeSHA256 {
				v.reason = "its content changed since the trial"
			}
		}
	case dryexec.KindSymlink:
		if f.Op == dryexec.OpDelete && f.LinkTarget != "" {
			buf := make([]byte, unix.PathMax)
			n, err := unix.Readlinkat(dfd, path.Base(p), buf)
			if err != nil || string(buf[:n]) != f.LinkTarget {
				v.reason = "the symlink points elsewhere now"
			}
		}
	case dryexec.KindDir:
		if f.Op == dryexec.OpRmdir {
			names, err := fswalk.ReadNamesAt(dfd, path.Base(p))
			if err != nil {
				return verdict{}, fmt.Errorf("commit: listing %s: %w", dryexec.QuotePath(p), err)
			}
			for _, n := range names {
				if !pl.removed[path.Join(p, n)] {
					v.reason = "the host has " + dryexec.QuotePath(n) + " in it, which the trial did not delete"
					break
				}
			}
		}
	}
	return v, nil
}

// unsafeErr: opening a path without following symlinks failed because the way
// leads through a symlink or something that is not a directory.
func unsafeErr(err error) bool {
	return errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOTDIR)
}

// kindOf takes st_mode, a uint32 on Linux and a uint16 on darwin.
func kindOf[M ~uint16 | ~uint32](mode M) dryexec.Kind {
	switch uint32(mode) & unix.S_IFMT {
	case unix.S_IFREG:
		return dryexec.KindFile
	case unix.S_IFDIR:
		return dryexec.KindDir
	case unix.S_IFLNK:
		return dryexec.KindSymlink
	case unix.S_IFIFO:
		return dryexec.KindFIFO
	}
	return dryexec.KindOther
}

func hashAt(dfd int, name string) (string, error) {
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return "", err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// applier carries out one journaled commit.
type applier struct {
	opt   Options
	j     *journal
	dirs  *dirs // parent dir fds, opened without following symlinks
	point int
	// touched holds the steps that may have changed the host: a rollback in
	// this process leaves the others alone (a crash's Recover undoes all).
	touched map[*step]bool
	// placed holds the paths whose new content is in place: a hard link to
	// one is made from its path, else from its temp.
	placed map[string]bool
	byPath map[string]*step // the place steps
	buf    []byte           // copies contents
}

func (a *applier) hook() {
	a.point++
	if a.opt.Hook != nil {
		a.opt.Hook(a.point)
	}
}

func (a *applier) closeDirs() { a.dirs.close() }

func (a *applier) dir(p string) (int, error) {
	parent := path.Dir(p)
	fd, err := a.dirs.open(parent)
	switch {
	case unsafeErr(err):
		return -1, fmt.Errorf("%w: %s: %v", dryexec.ErrUnsafePath, dryexec.QuotePath(parent), err)
	case err != nil:
		return -1, fmt.Errorf("commit: opening %s: %w", dryexec.QuotePath(parent), err)
	}
	return fd, nil
}

// prehash reads every content the commit will write from the blob store and
// checks it against the delta's sha256 and size before the host is touched:
// staging checks the bytes it copies again, but by then temps stand beside
// their targets.
func (a *applier) prehash(ctx context.Context) error {
	seen := map[string]bool{}
	for i := range a.j.Steps {
		s := &a.j.Steps[i]
		if s.Kind != stepPlace || s.FileKnd != dryexec.KindFile || s.LinkTo != "" || seen[s.SHA] {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		seen[s.SHA] = true
		if err := a.hashBlob(s); err != nil {
			return err
		}
	}
	return nil
}

func (a *applier) hashBlob(s *step) error {
	if a.opt.OpenBlob == nil {
		return errors.New("commit: no blob store to read contents from")
	}
	src, err := a.opt.OpenBlob(s.SHA)
	if err != nil {
		return fmt.Errorf("commit: content of %s: %w", dryexec.QuotePath(s.Path), err)
	}
	defer src.Close()
	if a.buf == nil {
		a.buf = make([]byte, 64<<10)
	}
	h := sha256.New()
	n, err := io.CopyBuffer(h, struct{ io.Reader }{src}, a.buf)
	if err != nil {
		return fmt.Errorf("commit: reading the content of %s: %w", dryexec.QuotePath(s.Path), err)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != s.SHA || n != s.Size {
		return fmt.Errorf("commit: stored content of %s: %w (the trial store is damaged); nothing was changed", dryexec.QuotePath(s.Path), ErrContentMismatch)
	}
	return nil
}

func (a *applier) run(ctx context.Context) error {
	a.placed, a.byPath = map[string]bool{}, map[string]*step{}
	for i := range a.j.Steps {
		if s := &a.j.Steps[i]; s.Kind == stepPlace {
			a.byPath[s.Path] = s
		}
	}
	if err := writeJournal(a.opt.JournalDir, a.j); err != nil {
		return err
	}
	a.hook()
	// Stage every new content whose directory exists, then make it durable with
	// one syncfs per filesystem instead of an fsync per file. Hard links come
	// after the content they link to.
	for _, links := range []bool{false, true} {
		for i := range a.j.Steps {
			s := &a.j.Steps[i]
			if s.Kind != stepPlace || s.InNewDir || (s.LinkTo != "") != links {
				continue
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := a.stage(s); err != nil {
				return err
			}
			a.hook()
		}
	}
	if err := a.dirs.sync(); err != nil {
		return err
	}
	a.j.State = stateStaged
	if err := writeJournal(a.opt.JournalDir, a.j); err != nil {
		return err
	}
	a.hook()
	for i := range a.j.Steps {
		if err := a.do(&a.j.Steps[i]); err != nil {
			return err
		}
		a.hook()
	}
	// New directories kept owner write access while they were filled (a commit
	// run by their owner rather than root needs it); now, with every content
	// in place, they get their mode and the trial's mtime, deepest first (as
	// cp -a and rsync -a do: an entry made in a directory changes its mtime).
	for _, s := range slices.Backward(a.j.Steps) {
		if s.Kind != stepMkdir || (s.Mode&0o700 == 0o700 && s.Mtime == 0) {
			continue
		}
		dfd, err := a.dir(s.Path)
		if err != nil {
			return err
		}
		name := path.Base(s.Path)
		if s.Mode&0o700 != 0o700 {
			if err := chmodAt(dfd, name, s.Mode); err != nil {
				return fmt.Errorf("commit: chmod %s: %w", dryexec.QuotePath(s.Path), err)
			}
		}
		if err := setMtime(dfd, name, -1, s.Mtime); err != nil {
			return fmt.Errorf("commit: setting the mtime of %s: %w", dryexec.QuotePath(s.Path), err)
		}
	}
	if err := a.dirs.sync(); err != nil {
		return err
	}
	a.j.State = stateApplied
	if err := writeJournal(a.opt.JournalDir, a.j); err != nil {
		return err
	}
	a.hook()
	finish(a.j)
	return nil
}

// setMtime sets the mtime of name in dfd (never following a symlink: a
// symlink's own mtime is set), or of fd when it is not -1 (dfd and name then
// still name it: darwin, which has no futimens in x/sys, sets it through
// them), leaving the atime alone. mtime 0 (the delta does not say) does
// nothing.
func setMtime(dfd int, name string, fd int, mtime int64) error {
	if mtime == 0 {
		return nil
	}
	if fd >= 0 {
		return setFdMtime(dfd, name, fd, mtime)
	}
	ts := [2]unix.Timespec{omitTime, unix.NsecToTimespec(mtime)}
	return unix.UtimesNanoAt(dfd, name, ts[:], unix.AT_SYMLINK_NOFOLLOW)
}

// forgetJournal ends an applied commit: Options.Applied, then the journal
// goes. Nothing here is rolled back: the host has every change, and while
// the journal stays, Recover finishes the commit and reports it.
func (a *applier) forgetJournal() error {
	if a.opt.Applied != nil {
		if err := a.opt.Applied(); err != nil {
			return fmt.Errorf("commit: the changes are on the host, but %w; the journal stays, and the next recovery reports the commit", err)
		}
	}
	a.hook()
	return removeJournal(a.opt.JournalDir, a.j.Trial)
}

// stage writes s's new content to its temp name beside the target, verifying
// the bytes against the reviewed hash, with the final mode, owner and mtime.
func (a *applier) stage(s *step) error {
	dfd, err := a.dir(s.Temp)
	if err != nil {
		return err
	}
	a.touched[s] = true
	name := path.Base(s.Temp)
	switch {
	case s.LinkTo != "":
		ino, err := a.linkTemp(dfd, name, s)
		if err != nil {
			unix.Unlinkat(dfd, name, 0)
			return err
		}
		s.TempIno = ino
		return nil
	case s.FileKnd == dryexec.KindFile:
		ino, err := a.writeTemp(dfd, name, s)
		if err != nil {
			unix.Unlinkat(dfd, name, 0)
			return err
		}
		s.TempIno = ino
		return nil
	case s.FileKnd == dryexec.KindFIFO:
		if err := mkfifoAt(dfd, name, 0o600); err != nil {
			return fmt.Errorf("commit: creating fifo %s: %w", dryexec.QuotePath(s.Path), err)
		}
		if os.Geteuid() == 0 {
			if err := unix.Fchownat(dfd, name, s.UID, s.GID, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return fmt.Errorf("commit: chown %s: %w", dryexec.QuotePath(s.Path), err)
			}
		}
		// After chown, which clears setuid/setgid; umask played no part.
		if err := chmodAt(dfd, name, s.Mode); err != nil {
			return fmt.Errorf("commit: chmod %s: %w", dryexec.QuotePath(s.Path), err)
		}
	default: // symlink
		if err := unix.Symlinkat(s.Link, dfd, name); err != nil {
			return fmt.Errorf("commit: creating symlink %s: %w", dryexec.QuotePath(s.Path), err)
		}
		if os.Geteuid() == 0 {
			unix.Fchownat(dfd, name, s.UID, s.GID, unix.AT_SYMLINK_NOFOLLOW)
		}
	}
	if err := setMtime(dfd, name, -1, s.Mtime); err != nil {
		return fmt.Errorf("commit: setting the mtime of %s: %w", dryexec.QuotePath(s.Path), err)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("commit: stat %s: %w", dryexec.QuotePath(s.Temp), err)
	}
	s.TempIno = st.Ino
	return nil
}

// linkTemp makes s's temp a hard link to the content of its group's first
// path (s.LinkTo): at that path once placed, else at its temp. Where the two
// are on different filesystems (no link possible) it writes a copy.
func (a *applier) linkTemp(dfd int, name string, s *step) (uint64, error) {
	if s.LinkHost {
		return a.linkHost(dfd, name, s)
	}
	lead := a.byPath[s.LinkTo]
	if lead == nil {
		return 0, fmt.Errorf("commit: %s links to %s, which this commit does not write", dryexec.QuotePath(s.Path), dryexec.QuotePath(s.LinkTo))
	}
	from := lead.Temp
	if a.placed[lead.Path] {
		from = lead.Path
	}
	ldfd, err := a.dir(from)
	if err != nil {
		return 0, err
	}
	if err := unix.Linkat(ldfd, path.Base(from), dfd, name, 0); err != nil {
		if errors.Is(err, unix.EXDEV) {
			return a.writeTemp(dfd, name, s)
		}
		return 0, fmt.Errorf("commit: linking %s to %s: %w", dryexec.QuotePath(s.Path), dryexec.QuotePath(s.LinkTo), err)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return 0, fmt.Errorf("commit: stat %s: %w", dryexec.QuotePath(s.Temp), err)
	}
	if st.Ino != lead.TempIno || kindOf(st.Mode) != dryexec.KindFile {
		return 0, fmt.Errorf("commit: %s was replaced while committing", dryexec.QuotePath(from))
	}
	return st.Ino, nil
}

// linkHost makes s's temp a hard link to the host file s.LinkTo, which this
// commit leaves as it is. The conflict check saw that file as the trial did;
// the link is re-hashed after it is made, so a file swapped in meanwhile is
// never what the new path gets. Where no link is possible it writes a copy.
func (a *applier) linkHost(dfd int, name string, s *step) (uint64, error) {
	ldfd, err := a.dir(s.LinkTo)
	if err != nil {
		return 0, err
	}
	if err := unix.Linkat(ldfd, path.Base(s.LinkTo), dfd, name, 0); err != nil {
		if errors.Is(err, unix.EXDEV) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EMLINK) {
			return a.writeTemp(dfd, name, s)
		}
		return 0, fmt.Errorf("commit: linking %s to %s: %w", dryexec.QuotePath(s.Path), dryexec.QuotePath(s.LinkTo), err)
	}
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return 0, fmt.Errorf("commit: opening the link %s: %w", dryexec.QuotePath(s.Temp), err)
	}
	f := os.NewFile(uintptr(fd), s.Temp)
	defer f.Close()
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, fmt.Errorf("commit: stat %s: %w", dryexec.QuotePath(s.Temp), err)
	}
	h := sha256.New()
	if kindOf(st.Mode) != dryexec.KindFile {
		return 0, fmt.Errorf("commit: %s was replaced while committing", dryexec.QuotePath(s.LinkTo))
	}
	if _, err := io.Copy(h, f); err != nil {
		return 0, fmt.Errorf("commit: reading %s: %w", dryexec.QuotePath(s.LinkTo), err)
	}
	if hex.EncodeToString(h.Sum(nil)) != s.SHA {
		return 0, fmt.Errorf("commit: %s was replaced while committing", dryexec.QuotePath(s.LinkTo))
	}
	return st.Ino, nil
}

// writeTemp writes s's content to the new file name in dfd and returns its
// inode. It works on the bare fd, with one reused buffer: a commit writes
// thousands of small files and each saved syscall or allocation shows.
func (a *applier) writeTemp(dfd int, name string, s *step) (uint64, error) {
	if a.opt.OpenBlob == nil {
		return 0, errors.New("commit: no blob store to read contents from")
	}
	src, err := a.opt.OpenBlob(s.SHA)
	if err != nil {
		return 0, fmt.Errorf("commit: content of %s: %w", dryexec.QuotePath(s.Path), err)
	}
	defer src.Close()
	fd, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return 0, fmt.Errorf("commit: creating temp for %s: %w", dryexec.QuotePath(s.Path), err)
	}
	ino, err := a.fill(dfd, name, fd, src, s)
	if cerr := unix.Close(fd); err == nil && cerr != nil {
		err = fmt.Errorf("commit: writing %s: %w", dryexec.QuotePath(s.Path), cerr)
	}
	return ino, err
}

func (a *applier) fill(dfd int, name string, fd int, src io.Reader, s *step) (uint64, error) {
	if a.buf == nil {
		a.buf = make([]byte, 64<<10)
	}
	h := sha256.New()
	var n int64
	var err error
	if f, ok := src.(*os.File); ok {
		// A stored file keeps the trial file's holes (docs/limits.md): so
		// does the committed one, as cp --sparse and rsync -S keep them; a
		// 100 GiB sparse file must not become 100 GiB of zeros on the host.
		n, err = copySparse(fd, f, h, a.buf)
	} else {
		// struct{ io.Reader } hides a WriterTo, which would bring its own buffer.
		n, err = io.CopyBuffer(io.MultiWriter(fdWriter(fd), h), struct{ io.Reader }{src}, a.buf)
	}
	if err != nil {
		return 0, fmt.Errorf("commit: writing %s: %w", dryexec.QuotePath(s.Path), err)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != s.SHA || n != s.Size {
		return 0, fmt.Errorf("commit: stored content of %s: %w (the trial store is damaged)", dryexec.QuotePath(s.Path), ErrContentMismatch)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return 0, fmt.Errorf("commit: stat %s: %w", dryexec.QuotePath(s.Temp), err)
	}
	chowned := false
	if os.Geteuid() == 0 && (int(st.Uid) != s.UID || int(st.Gid) != s.GID) {
		if err := unix.Fchown(fd, s.UID, s.GID); err != nil {
			return 0, fmt.Errorf("commit: chown %s: %w", dryexec.QuotePath(s.Path), err)
		}
		chowned = true
	}
	// chown clears setuid/setgid, so the mode comes after it.
	if chowned || uint32(st.Mode)&0o7777 != s.Mode {
		if err := unix.Fchmod(fd, s.Mode); err != nil {
			return 0, fmt.Errorf("commit: chmod %s: %w", dryexec.QuotePath(s.Path), err)
		}
	}
	// Last: every write above changed the mtime.
	if err := setMtime(dfd, name, fd, s.Mtime); err != nil {
		return 0, fmt.Errorf("commit: setting the mtime of %s: %w", dryexec.QuotePath(s.Path), err)
	}
	return st.Ino, nil
}

// fdWriter writes to a bare (blocking) file descriptor.
type fdWriter int

func (w fdWriter) Write(p []byte) (int, error) {
	n := 0
	for n < len(p) {
		m, err := unix.Write(int(w), p[n:])
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return n, err
		}
		n += m
	}
	return n, nil
}

// do carries out one step.
func (a *applier) do(s *step) error {
	if s.Kind == stepTouch {
		return nil // once applied (finish)
	}
	dfd, err := a.dir(s.Path)
	if err != nil {
		return err
	}
	a.touched[s] = true
	name := path.Base(s.Path)
	switch s.Kind {
	case stepRemove:
		if err := renameNoReplace(dfd, name, dfd, path.Base(s.Backup)); err != nil {
			return fmt.Errorf("commit: removing %s: %w", dryexec.QuotePath(s.Path), err)
		}
		a.dirs.forget(s.Path)
	case stepMkdir:
		if err := unix.Mkdirat(dfd, name, 0o700); err != nil {
			return fmt.Errorf("commit: mkdir %s: %w", dryexec.QuotePath(s.Path), err)
		}
		if os.Geteuid() == 0 {
			unix.Fchownat(dfd, name, s.UID, s.GID, unix.AT_SYMLINK_NOFOLLOW)
		}
		// After chown, which may clear setgid. See run for the final mode.
		if err := chmodAt(dfd, name, s.Mode|0o700); err != nil {
			return fmt.Errorf("commit: chmod %s: %w", dryexec.QuotePath(s.Path), err)
		}
	case stepPlace:
		if s.InNewDir {
			if err := a.stage(s); err != nil {
				return err
			}
		}
		rename := renameNoReplace
		if s.Replace {
			rename = renameExchange
		}
		if err := rename(dfd, path.Base(s.Temp), dfd, name); err != nil {
			return fmt.Errorf("commit: writing %s: %w", dryexec.QuotePath(s.Path), err)
		}
		a.placed[s.Path] = true
	case stepChmod:
		var st unix.Stat_t
		err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW)
		link := err == nil && kindOf(st.Mode) == dryexec.KindSymlink
		if err != nil || (link && !(s.Chown && s.FileKnd == dryexec.KindSymlink)) {
			return fmt.Errorf("commit: chmod %s: not there or a symlink", dryexec.QuotePath(s.Path))
		}
		if s.Chown {
			if err := unix.Fchownat(dfd, name, s.UID, s.GID, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return fmt.Errorf("commit: chown %s: %w", dryexec.QuotePath(s.Path), err)
			}
		}
		if link {
			return nil // a symlink has no mode of its own
		}
		if err := chmodAt(dfd, name, s.Mode); err != nil {
			return fmt.Errorf("commit: chmod %s: %w", dryexec.QuotePath(s.Path), err)
		}
	}
	return nil
}

// chmodAt sets the mode of name in dfd, never through a symlink (checking
// first and then following would let a symlink swapped in between redirect the
// chmod anywhere).
func chmodAt(dfd int, name string, mode uint32) error {
	err := unix.Fchmodat(dfd, name, mode, unix.AT_SYMLINK_NOFOLLOW)
	if !errors.Is(err, unix.EOPNOTSUPP) {
		return err
	}
	// A symlink, or a kernel without fchmodat2 (before 6.6), where the best
	// left is to check right before.
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	if kindOf(st.Mode) == dryexec.KindSymlink {
		return fmt.Errorf("%s is a symlink", name)
	}
	return unix.Fchmodat(dfd, name, mode, 0)
}

// syncFS makes durable every filesystem that holds one of dirs (O_PATH fds,
// which syncfs refuses with EBADF: each is reopened for reading first).
func syncFS(dirs []int) error {
	byDev := map[uint64][]int{}
	for _, fd := range dirs {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) == nil {
			byDev[uint64(st.Dev)] = append(byDev[uint64(st.Dev)], fd)
		}
	}
	for _, fds := range byDev {
		synced := false
		for _, fd := range fds {
			rfd, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
			if err != nil {
				continue // an unreadable directory: try another on this filesystem
			}
			err = syncfs(rfd)
			unix.Close(rfd)
			if err != nil {
				return fmt.Errorf("commit: syncfs: %w", err)
			}
			synced = true
			break
		}
		if !synced {
			unix.Sync()
		}
	}
	return nil
}

// rollback undoes a failed apply in this process.
func (a *applier) rollback() error {
	a.closeDirs()
	if err := undo(a.j, func(s *step) bool { return a.touched[s] }); err != nil {
		return err
	}
	return removeJournal(a.opt.JournalDir, a.j.Trial)
}

// undo puts the host back as it was, from whatever point the apply reached:
// each step is reversed only if its effect is there, so undo is idempotent.
// only, when set, limits it to the steps it accepts. What undo did is durable
// before it returns, so the journal may go.
func undo(j *journal, only func(*step) bool) error {
	created := map[string]bool{}
	for _, s := range j.Steps {
		if s.Kind == stepMkdir {
			created[s.Path] = true
		}
	}
	// One cache for every step (a deep tree's steps share their ancestors),
	// told of every rename and removal so that no step sees a stale directory.
	dirs := newDirs()
	defer dirs.close()
	var errs []error
	for i := len(j.Steps) - 1; i >= 0; i-- {
		if only != nil && !only(&j.Steps[i]) {
			continue
		}
		if err := undoStep(j.Steps[i], created, dirs); err != nil {
			errs = append(errs, err)
		}
	}
	if err := dirs.sync(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// underCreated: an ancestor of p is a directory the journal's commit creates.
func underCreated(p string, created map[string]bool) bool {
	for i := strings.LastIndexByte(p, '/'); i > 0; i = strings.LastIndexByte(p[:i], '/') {
		if created[p[:i]] {
			return true
		}
	}
	return false
}

func undoStep(s step, created map[string]bool, dirs *dirs) error {
	if s.Kind == stepTouch {
		return nil // set only once the commit is applied: nothing to undo
	}
	dfd, err := dirs.open(path.Dir(s.Path))
	switch {
	case errors.Is(err, unix.ENOENT):
		// Its directory was to be created by this commit and is not (or no
		// longer) there: nothing of this step can be on the host.
		return nil
	case unsafeErr(err) && underCreated(s.Path, created):
		// The directory this commit makes there is not made yet: the host's
		// old file or symlink still stands in its place.
		return nil
	case err != nil:
		return fmt.Errorf("rollback %s: %w", dryexec.QuotePath(s.Path), err)
	}
	name := path.Base(s.Path)
	ino := func(n string) (uint64, bool) {
		var st unix.Stat_t
		if unix.Fstatat(dfd, n, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			return 0, false
		}
		return st.Ino, true
	}
	switch s.Kind {
	case stepChmod:
		var st unix.Stat_t
		if unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
			break
		}
		if s.Chown {
			// The host's owner first: chown clears setuid and setgid,
			// which the old mode then sets back.
			if err := unix.Fchownat(dfd, name, s.OldUID, s.OldGID, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				return fmt.Errorf("rollback %s: chown: %w", dryexec.QuotePath(s.Path), err)
			}
		}
		if kindOf(st.Mode) != dryexec.KindSymlink {
			return chmodAt(dfd, name, s.OldMode)
		}
	case stepPlace:
		temp := path.Base(s.Temp)
		if cur, ok := ino(name); ok && s.TempIno != 0 && cur == s.TempIno {
			if s.Replace {
				if err := renameExchange(dfd, temp, dfd, name); err != nil {
					return fmt.Errorf("rollback %s: %w", dryexec.QuotePath(s.Path), err)
				}
			} else if err := unix.Unlinkat(dfd, name, 0); err != nil {
				return fmt.Errorf("rollback %s: %w", dryexec.QuotePath(s.Path), err)
			}
		}
		if err := unix.Unlinkat(dfd, temp, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("rollback %s: %w", dryexec.QuotePath(s.Temp), err)
		}
	case stepMkdir:
		// A directory the commit created did not exist before: remove it with
		// whatever the commit staged inside. Where something else stood, that
		// must have been moved to its backup first, or what is there is it.
		var st unix.Stat_t
		if unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil || kindOf(st.Mode) != dryexec.KindDir {
			return nil
		}
		if s.Backup != "" {
			if _, ok := ino(path.Base(s.Backup)); !ok {
				return nil
			}
		}
		dirs.forget(s.Path)
		if err := removeAllAt(dfd, name); err != nil {
			return fmt.Errorf("rollback %s: %w", dryexec.QuotePath(s.Path), err)
		}
	case stepRemove:
		if _, ok := ino(name); ok {
			return nil
		}
		if _, ok := ino(path.Base(s.Backup)); ok {
			dirs.forget(s.Path)
			if err := renameNoReplace(dfd, path.Base(s.Backup), dfd, name); err != nil {
				return fmt.Errorf("rollback %s: %w", dryexec.QuotePath(s.Path), err)
			}
		}
	}
	return nil
}

// finish deletes what an applied commit no longer needs: backups of removed
// paths and the temps that hold replaced contents. It never follows a symlink:
// the backups of what a removed directory held were named inside it, and a
// symlink may stand at its path now.
func finish(j *journal) {
	dirs := newDirs()
	defer dirs.close()
	// A backup inside a directory that was itself moved to its backup went
	// with it: no lookup (in a deep tree, each would walk from "/" to fail).
	removed := map[string]bool{}
	for _, s := range j.Steps {
		if s.Kind == stepRemove {
			removed[s.Path] = true
		}
	}
	gone := map[string]bool{}
	var within func(d string) bool
	within = func(d string) bool {
		if d == "/" {
			return false
		}
		if g, ok := gone[d]; ok {
			return g
		}
		g := removed[d] || within(parentDir(d))
		gone[d] = g
		return g
	}
	for _, s := range j.Steps {
		var p string
		switch {
		case s.Kind == stepRemove && within(parentDir(s.Path)):
			continue
		case s.Kind == stepRemove:
			p = s.Backup
		case s.Kind == stepPlace && s.Replace:
			p = s.Temp // the old content, swapped out; other temps were renamed into place
		default:
			continue
		}
		// Where the parent is gone or not a directory reachable without
		// symlinks, the backup went with a removed directory's own backup.
		if dfd, err := dirs.open(path.Dir(p)); err == nil {
			dirs.forget(p)
			removeAllAt(dfd, path.Base(p))
		}
	}
	// Last, the mtimes: the deletes above moved their dirs'.
	if applyTouches(j, dirs) {
		dirs.sync()
	}
}

// removeAllAt removes name in dfd and, if it is a directory, everything in it,
// never following a symlink.
func removeAllAt(dfd int, name string) error {
	err := unix.Unlinkat(dfd, name, 0)
	if err == nil || errors.Is(err, unix.ENOENT) {
		return nil
	}
	if !errors.Is(err, unix.EISDIR) {
		return err
	}
	open := func() (int, error) {
		return unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	}
	fd, err := open()
	if errors.Is(err, unix.EACCES) && chmodAt(dfd, name, 0o700) == nil {
		fd, err = open() // an unreadable directory of the caller's own
	}
	if err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		unix.Fchmod(fd, 0o700) // a read-only directory of the caller's own
	}
	d := os.NewFile(uintptr(fd), name)
	names, err := d.Readdirnames(-1)
	errs := []error{err}
	for _, n := range names {
		errs = append(errs, removeAllAt(fd, n))
	}
	d.Close()
	if err := unix.Unlinkat(dfd, name, unix.AT_REMOVEDIR); err != nil && !errors.Is(err, unix.ENOENT) {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// copySparse copies src to the new, empty file fd with src's holes left as
// holes, hashing every byte (a hole as its zeros) into h, and returns the
// length. Where src's file system cannot tell holes (SEEK_DATA fails with
// EINVAL), everything is data.
func copySparse(fd int, src *os.File, h hash.Hash, buf []byte) (int64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(src.Fd()), &st); err != nil {
		return 0, err
	}
	size := st.Size
	zeros := make([]byte, min(int64(len(buf)), max(size, 1)))
	hashZeros := func(n int64) {
		for n > 0 {
			k := min(n, int64(len(zeros)))
			h.Write(zeros[:k])
			n -= k
		}
	}
	for off := int64(0); off < size; {
		data, err := unix.Seek(int(src.Fd()), off, unix.SEEK_DATA)
		switch {
		case errors.Is(err, unix.ENXIO):
			data = size // a hole to the end
		case errors.Is(err, unix.EINVAL):
			data = off // holes cannot be told: all data
		case err != nil:
			return off, err
		}
		if data > off {
			hashZeros(data - off)
			off = data
		}
		if off >= size {
			break
		}
		end, err := unix.Seek(int(src.Fd()), off, unix.SEEK_HOLE)
		if err != nil || end > size || end <= off {
			end = size
		}
		for off < end {
			k, err := src.ReadAt(buf[:min(int64(len(buf)), end-off)], off)
			if k > 0 {
				h.Write(buf[:k])
				if werr := pwriteAll(fd, buf[:k], off); werr != nil {
					return off, werr
				}
				off += int64(k)
			}
			if err != nil && !(errors.Is(err, io.EOF) && off == end) {
				if errors.Is(err, io.EOF) {
					return off, io.ErrUnexpectedEOF
				}
				return off, err
			}
		}
	}
	// The length, holes at the end included.
	if err := unix.Ftruncate(fd, size); err != nil {
		return size, err
	}
	return size, nil
}

// pwriteAll writes all of p at off in fd.
func pwriteAll(fd int, p []byte, off int64) error {
	for len(p) > 0 {
		n, err := unix.Pwrite(fd, p, off)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		p, off = p[n:], off+int64(n)
	}
	return nil
}
