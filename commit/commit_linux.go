package commit

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
)

// Options is one commit's input.
type Options struct {
	// Paths selects what to commit: absolute host paths; a directory selects
	// everything beneath it. Empty commits every change.
	Paths []string
	// Force commits over conflicts at every path; ForcePaths only at and beneath
	// the paths named. A path that leads through a symlink is never forced.
	Force      bool
	ForcePaths []string
	// OpenBlob opens the stored content whose sha256 is sha.
	OpenBlob func(sha string) (io.ReadCloser, error)
	// JournalDir holds the journal while a commit is in flight. The caller holds
	// the lock that keeps Recover and other commits out of it.
	JournalDir string
	// Hook, when set, is called at every numbered point of the commit; tests
	// kill the process there to prove crash safety.
	Hook func(point int)
	// Log receives debug records; nil logs nothing.
	Log *slog.Logger
}

// Apply commits the selected changes of d to the host, or changes nothing and
// returns an error (a *dryexec.CommitConflictError when the host moved on).
func Apply(ctx context.Context, d *dryexec.StateDelta, opt Options) ([]dryexec.FileChange, error) {
	changes, err := selectChanges(d, opt.Paths)
	if err != nil {
		return nil, err
	}
	pl, err := makePlan(d.TrialID, changes)
	if err != nil {
		return nil, err
	}
	if err := pl.check(d.TrialID, opt); err != nil {
		return nil, err
	}
	a := &applier{opt: opt, j: &journal{Trial: d.TrialID, State: statePlanned, Steps: pl.steps}, dirs: map[string]int{}}
	defer a.closeDirs()
	if err := a.run(ctx); err != nil {
		if rerr := a.rollback(); rerr != nil {
			return nil, fmt.Errorf("%w (and rolling back failed: %v; the journal stays for the next start)", err, rerr)
		}
		return nil, err
	}
	return pl.changes, nil
}

// check compares the host with what the trial started from, before anything is
// touched, and collects every conflict.
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
	paths := make([]string, 0, len(pl.first))
	for p := range pl.first {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	dirs := map[string]int{}
	defer func() {
		for _, fd := range dirs {
			unix.Close(fd)
		}
	}()
	for _, p := range paths {
		reason, unsafe, err := pl.checkOne(p, dirs)
		if err != nil {
			return err
		}
		if reason == "" {
			continue
		}
		if unsafe {
			return fmt.Errorf("%w: %s: %s; nothing was changed", dryexec.ErrUnsafePath, p, reason)
		}
		if !forced(p) {
			conflicts = append(conflicts, dryexec.Conflict{Path: p, Reason: reason})
		}
	}
	if len(conflicts) > 0 {
		return &dryexec.CommitConflictError{TrialID: trialID, Conflicts: conflicts}
	}
	return nil
}

// checkOne returns why the host's state at p is not what the trial started from
// ("" when it is), and whether the reason is an unsafe path.
func (pl *plan) checkOne(p string, dirs map[string]int) (reason string, unsafe bool, err error) {
	f := pl.first[p]
	parent := path.Dir(p)
	// Beneath a directory this commit creates, the host's state does not matter:
	// that directory's own check (its parent opened without symlinks, its old
	// occupant verified) covers the way there.
	for a := parent; a != "/"; a = path.Dir(a) {
		if pl.created[a] {
			if f.Op == dryexec.OpCreate || f.Op == dryexec.OpMkdir || f.Op == dryexec.OpSymlink {
				return "", false, nil
			}
			return "it is beneath a directory the trial created", false, nil
		}
	}
	dfd, err := openDir(parent, dirs)
	switch {
	case errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOTDIR):
		return "a parent directory is a symlink or not a directory", true, nil
	case errors.Is(err, unix.ENOENT):
		return "parent directory " + parent + " is missing", false, nil
	case err != nil:
		return "", false, fmt.Errorf("commit: opening %s: %w", parent, err)
	}
	var st unix.Stat_t
	serr := unix.Fstatat(dfd, path.Base(p), &st, unix.AT_SYMLINK_NOFOLLOW)
	exists := serr == nil
	if serr != nil && !errors.Is(serr, unix.ENOENT) {
		return "", false, fmt.Errorf("commit: stat %s: %w", p, serr)
	}
	switch f.Op {
	case dryexec.OpCreate, dryexec.OpMkdir, dryexec.OpSymlink:
		if exists {
			return "the trial created it, but the host has it now", false, nil
		}
		return "", false, nil
	}
	if !exists {
		return "the host no longer has it", false, nil
	}
	kind := kindOf(st.Mode)
	if kind != f.Kind {
		return fmt.Sprintf("it was a %s, the host has a %s now", f.Kind, kind), false, nil
	}
	wantMode := f.Mode
	if f.Op == dryexec.OpModify || f.Op == dryexec.OpChmod {
		wantMode = f.BeforeMode
	}
	if kind != dryexec.KindSymlink && wantMode != "" && parseMode(wantMode) != st.Mode&0o7777 {
		return fmt.Sprintf("mode is %04o, the trial started from %s", st.Mode&0o7777, wantMode), false, nil
	}
	switch kind {
	case dryexec.KindFile:
		if f.BeforeSHA256 != "" {
			sum, err := hashAt(dfd, path.Base(p))
			if err != nil {
				return "", false, fmt.Errorf("commit: reading %s: %w", p, err)
			}
			if sum != f.BeforeSHA256 {
				return "its content changed since the trial", false, nil
			}
		}
	case dryexec.KindSymlink:
		if f.Op == dryexec.OpDelete && f.LinkTarget != "" {
			buf := make([]byte, unix.PathMax)
			n, err := unix.Readlinkat(dfd, path.Base(p), buf)
			if err != nil || string(buf[:n]) != f.LinkTarget {
				return "the symlink points elsewhere now", false, nil
			}
		}
	case dryexec.KindDir:
		if f.Op == dryexec.OpRmdir {
			names, err := listAt(dfd, path.Base(p))
			if err != nil {
				return "", false, fmt.Errorf("commit: listing %s: %w", p, err)
			}
			for _, n := range names {
				if !pl.removed[path.Join(p, n)] {
					return "the host has " + n + " in it, which the trial did not delete", false, nil
				}
			}
		}
	}
	return "", false, nil
}

func kindOf(mode uint32) dryexec.Kind {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return dryexec.KindFile
	case unix.S_IFDIR:
		return dryexec.KindDir
	case unix.S_IFLNK:
		return dryexec.KindSymlink
	}
	return dryexec.KindOther
}

// openDir opens dir with no symlink anywhere on the way, caching the fd.
func openDir(dir string, cache map[string]int) (int, error) {
	if fd, ok := cache[dir]; ok {
		return fd, nil
	}
	fd, err := unix.Openat2(unix.AT_FDCWD, dir, &unix.OpenHow{
		Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
	})
	if err != nil {
		return -1, err
	}
	cache[dir] = fd
	return fd, nil
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

func listAt(dfd int, name string) ([]string, error) {
	fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	return f.Readdirnames(-1)
}

// applier carries out one journaled commit.
type applier struct {
	opt   Options
	j     *journal
	dirs  map[string]int // parent dir fds, opened without following symlinks
	point int
}

func (a *applier) hook() {
	a.point++
	if a.opt.Hook != nil {
		a.opt.Hook(a.point)
	}
}

func (a *applier) closeDirs() {
	for _, fd := range a.dirs {
		unix.Close(fd)
	}
	clear(a.dirs)
}

func (a *applier) dir(p string) (int, error) {
	fd, err := openDir(path.Dir(p), a.dirs)
	if err != nil {
		return -1, fmt.Errorf("%w: %s: %v", dryexec.ErrUnsafePath, path.Dir(p), err)
	}
	return fd, nil
}

func (a *applier) run(ctx context.Context) error {
	if err := writeJournal(a.opt.JournalDir, a.j); err != nil {
		return err
	}
	a.hook()
	// Stage every new content whose directory exists, then make it durable with
	// one syncfs per filesystem instead of an fsync per file.
	for i := range a.j.Steps {
		s := &a.j.Steps[i]
		if s.Kind != stepPlace || s.InNewDir {
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
	if err := a.syncAll(); err != nil {
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
	if err := a.syncAll(); err != nil {
		return err
	}
	a.j.State = stateApplied
	if err := writeJournal(a.opt.JournalDir, a.j); err != nil {
		return err
	}
	a.hook()
	finish(a.j)
	a.hook()
	return removeJournal(a.opt.JournalDir, a.j.Trial)
}

// stage writes s's new content to its temp name beside the target, verifying
// the bytes against the reviewed hash, with the final mode and owner.
func (a *applier) stage(s *step) error {
	dfd, err := a.dir(s.Temp)
	if err != nil {
		return err
	}
	name := path.Base(s.Temp)
	if s.FileKnd == dryexec.KindSymlink {
		if err := unix.Symlinkat(s.Link, dfd, name); err != nil {
			return fmt.Errorf("commit: creating symlink %s: %w", s.Path, err)
		}
		if os.Geteuid() == 0 {
			unix.Fchownat(dfd, name, s.UID, s.GID, unix.AT_SYMLINK_NOFOLLOW)
		}
	} else {
		if err := a.writeTemp(dfd, name, s); err != nil {
			unix.Unlinkat(dfd, name, 0)
			return err
		}
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("commit: stat %s: %w", s.Temp, err)
	}
	s.TempIno = st.Ino
	return nil
}

func (a *applier) writeTemp(dfd int, name string, s *step) error {
	if a.opt.OpenBlob == nil {
		return errors.New("commit: no blob store to read contents from")
	}
	src, err := a.opt.OpenBlob(s.SHA)
	if err != nil {
		return fmt.Errorf("commit: content of %s: %w", s.Path, err)
	}
	defer src.Close()
	fd, err := unix.Openat(dfd, name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return fmt.Errorf("commit: creating temp for %s: %w", s.Path, err)
	}
	f := os.NewFile(uintptr(fd), name)
	defer f.Close()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(f, h), src)
	if err != nil {
		return fmt.Errorf("commit: writing %s: %w", s.Path, err)
	}
	if sum := hex.EncodeToString(h.Sum(nil)); sum != s.SHA || n != s.Size {
		return fmt.Errorf("commit: stored content of %s does not match the reviewed hash (the trial store is damaged)", s.Path)
	}
	// chown clears setuid/setgid, so the mode comes after it.
	if os.Geteuid() == 0 {
		if err := f.Chown(s.UID, s.GID); err != nil {
			return fmt.Errorf("commit: chown %s: %w", s.Path, err)
		}
	}
	if err := f.Chmod(os.FileMode(s.Mode&0o777) | modeBits(s.Mode)); err != nil {
		return fmt.Errorf("commit: chmod %s: %w", s.Path, err)
	}
	return nil
}

// modeBits turns unix setuid/setgid/sticky bits into os.FileMode bits.
func modeBits(m uint32) os.FileMode {
	var fm os.FileMode
	if m&unix.S_ISUID != 0 {
		fm |= os.ModeSetuid
	}
	if m&unix.S_ISGID != 0 {
		fm |= os.ModeSetgid
	}
	if m&unix.S_ISVTX != 0 {
		fm |= os.ModeSticky
	}
	return fm
}

// do carries out one step.
func (a *applier) do(s *step) error {
	dfd, err := a.dir(s.Path)
	if err != nil {
		return err
	}
	name := path.Base(s.Path)
	switch s.Kind {
	case stepRemove:
		if err := unix.Renameat2(dfd, name, dfd, path.Base(s.Backup), unix.RENAME_NOREPLACE); err != nil {
			return fmt.Errorf("commit: removing %s: %w", s.Path, err)
		}
	case stepMkdir:
		if err := unix.Mkdirat(dfd, name, 0o700); err != nil {
			return fmt.Errorf("commit: mkdir %s: %w", s.Path, err)
		}
		if os.Geteuid() == 0 {
			unix.Fchownat(dfd, name, s.UID, s.GID, unix.AT_SYMLINK_NOFOLLOW)
		}
		if err := unix.Fchmodat(dfd, name, s.Mode, 0); err != nil {
			return fmt.Errorf("commit: chmod %s: %w", s.Path, err)
		}
	case stepPlace:
		if s.InNewDir {
			if err := a.stage(s); err != nil {
				return err
			}
		}
		flags := uint(unix.RENAME_NOREPLACE)
		if s.Replace {
			flags = unix.RENAME_EXCHANGE
		}
		if err := unix.Renameat2(dfd, path.Base(s.Temp), dfd, name, flags); err != nil {
			return fmt.Errorf("commit: writing %s: %w", s.Path, err)
		}
	case stepChmod:
		var st unix.Stat_t
		if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil || kindOf(st.Mode) == dryexec.KindSymlink {
			return fmt.Errorf("commit: chmod %s: not there or a symlink", s.Path)
		}
		if err := unix.Fchmodat(dfd, name, s.Mode, 0); err != nil {
			return fmt.Errorf("commit: chmod %s: %w", s.Path, err)
		}
	}
	return nil
}

func (a *applier) syncAll() error {
	seen := map[uint64]bool{}
	for _, fd := range a.dirs {
		var st unix.Stat_t
		if unix.Fstat(fd, &st) != nil || seen[st.Dev] {
			continue
		}
		seen[st.Dev] = true
		if err := unix.Syncfs(fd); err != nil && !errors.Is(err, unix.EBADF) {
			return fmt.Errorf("commit: syncfs: %w", err)
		}
	}
	return nil
}

// rollback undoes a failed apply in this process.
func (a *applier) rollback() error {
	a.closeDirs()
	if err := undo(a.j); err != nil {
		return err
	}
	return removeJournal(a.opt.JournalDir, a.j.Trial)
}

// undo puts the host back as it was, from whatever point the apply reached:
// each step is reversed only if its effect is there, so undo is idempotent.
func undo(j *journal) error {
	var errs []error
	for _, s := range slices.Backward(j.Steps) {
		if err := undoStep(s); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func undoStep(s step) error {
	dirs := map[string]int{}
	defer func() {
		for _, fd := range dirs {
			unix.Close(fd)
		}
	}()
	dfd, err := openDir(path.Dir(s.Path), dirs)
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		// Its directory was to be created by this commit and is not (or no
		// longer) there: nothing of this step can be on the host.
		return nil
	}
	if err != nil {
		return fmt.Errorf("rollback %s: %w", s.Path, err)
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
		if unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && kindOf(st.Mode) != dryexec.KindSymlink {
			return unix.Fchmodat(dfd, name, s.OldMode, 0)
		}
	case stepPlace:
		temp := path.Base(s.Temp)
		if cur, ok := ino(name); ok && s.TempIno != 0 && cur == s.TempIno {
			if s.Replace {
				if err := unix.Renameat2(dfd, temp, dfd, name, unix.RENAME_EXCHANGE); err != nil {
					return fmt.Errorf("rollback %s: %w", s.Path, err)
				}
			} else if err := unix.Unlinkat(dfd, name, 0); err != nil {
				return fmt.Errorf("rollback %s: %w", s.Path, err)
			}
		}
		if err := unix.Unlinkat(dfd, temp, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("rollback %s: %w", s.Temp, err)
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
		return os.RemoveAll(s.Path)
	case stepRemove:
		if _, ok := ino(name); ok {
			return nil
		}
		if _, ok := ino(path.Base(s.Backup)); ok {
			if err := unix.Renameat2(dfd, path.Base(s.Backup), dfd, name, unix.RENAME_NOREPLACE); err != nil {
				return fmt.Errorf("rollback %s: %w", s.Path, err)
			}
		}
	}
	return nil
}

// finish deletes what an applied commit no longer needs: backups of removed
// paths and the temps that hold replaced contents.
func finish(j *journal) {
	for _, s := range j.Steps {
		switch {
		case s.Kind == stepRemove:
			os.RemoveAll(s.Backup)
		case s.Kind == stepPlace:
			os.Remove(s.Temp)
		}
	}
}
