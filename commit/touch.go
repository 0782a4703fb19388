//go:build linux || darwin

package commit

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
)

// A touched path (StateDelta.Touched) is one whose mtime alone moved in the
// trial. Commit sets that mtime, last: after every change and after finish
// has deleted its backups and swapped-out temps (which move their dirs'
// mtimes), files first, then dirs deepest first. A touch is checked like a
// modify before anything is done (the host must still have the content,
// size, kind, mode and mtime the trial started from) and again right before
// its mtime is set (the content is re-hashed through the descriptor whose
// mtime is then set), so a file changed meanwhile keeps its own mtime.

// touchVerdict is what checkTouch found at one touched path.
type touchVerdict struct {
	reason string // "" when the host is as the trial started from
	// drop: forcing leaves the touch out (the host's path is no longer the
	// one the trial touched: its content, kind or target moved, or it is
	// gone), rather than setting the mtime anyway.
	drop bool
	// quiet: leave the touch out without a conflict (a host dir whose
	// entries changed since: its own, later mtime stays).
	quiet bool
}

// checkTouches checks every selected touched path against the host. It
// returns the conflicts and the touches to apply.
func (pl *plan) checkTouches(dirs *dirs, forced func(string) bool) ([]dryexec.Conflict, []dryexec.FileChange, error) {
	var conflicts []dryexec.Conflict
	var keep []dryexec.FileChange
	for _, t := range pl.touched {
		for a := parentDir(t.Path); a != "/"; a = parentDir(a) {
			if pl.created[a] || pl.removed[a] {
				return nil, nil, fmt.Errorf("commit: %s is touched but beneath %s, which the trial replaces", dryexec.QuotePath(t.Path), dryexec.QuotePath(a))
			}
		}
		v, err := checkTouch(t, dirs)
		if err != nil {
			return nil, nil, err
		}
		switch {
		case v.quiet:
		case v.reason == "":
			keep = append(keep, t)
		case !forced(t.Path):
			conflicts = append(conflicts, dryexec.Conflict{Path: t.Path, Reason: v.reason + " (the trial only changed its mtime)"})
		case !v.drop:
			keep = append(keep, t)
		}
	}
	return conflicts, keep, nil
}

// checkTouch compares the host's state at touched path t with the state the
// trial started from.
func checkTouch(t dryexec.FileChange, dirs *dirs) (touchVerdict, error) {
	parent, name := parentDir(t.Path), path.Base(t.Path)
	dfd, err := dirs.open(parent)
	switch {
	case unsafeErr(err):
		return touchVerdict{}, fmt.Errorf("%w: %s: a parent directory is a symlink or not a directory; nothing was changed", dryexec.ErrUnsafePath, dryexec.QuotePath(t.Path))
	case errors.Is(err, unix.ENOENT):
		return touchVerdict{reason: "parent directory " + dryexec.QuotePath(parent) + " is missing", drop: true}, nil
	case err != nil:
		return touchVerdict{}, fmt.Errorf("commit: opening %s: %w", dryexec.QuotePath(parent), err)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); errors.Is(err, unix.ENOENT) {
		return touchVerdict{reason: "the host no longer has it", drop: true}, nil
	} else if err != nil {
		return touchVerdict{}, fmt.Errorf("commit: stat %s: %w", dryexec.QuotePath(t.Path), err)
	}
	if kind := kindOf(st.Mode); kind != t.Kind {
		return touchVerdict{reason: fmt.Sprintf("it was a %s, the host has a %s now", t.Kind, kind), drop: true}, nil
	}
	switch t.Kind {
	case dryexec.KindFile:
		if st.Size != t.Size {
			return touchVerdict{reason: "its content changed since the trial", drop: true}, nil
		}
		sum, err := hashAt(dfd, name)
		if err != nil {
			return touchVerdict{}, fmt.Errorf("commit: reading %s: %w", dryexec.QuotePath(t.Path), err)
		}
		if sum != t.SHA256 {
			return touchVerdict{reason: "its content changed since the trial", drop: true}, nil
		}
	case dryexec.KindSymlink:
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(dfd, name, buf)
		if err != nil || string(buf[:n]) != t.LinkTarget {
			return touchVerdict{reason: "the symlink points elsewhere now", drop: true}, nil
		}
	}
	if t.Kind != dryexec.KindSymlink && t.Mode != "" && parseMode(t.Mode) != uint32(st.Mode)&0o7777 {
		return touchVerdict{reason: fmt.Sprintf("mode is %04o, the trial started from %s", st.Mode&0o7777, t.Mode)}, nil
	}
	if mt := st.Mtim.Nano(); t.BeforeMtimeNS != 0 && mt != t.BeforeMtimeNS {
		if t.Kind == dryexec.KindDir {
			// Its entries changed on the host since the trial started (an
			// editor's swap file, another commit): the host's later mtime
			// says so, and stays.
			return touchVerdict{quiet: true}, nil
		}
		return touchVerdict{reason: fmt.Sprintf("its mtime moved since the trial started (%s, the trial started from %s)",
			fmtNS(mt), fmtNS(t.BeforeMtimeNS))}, nil
	}
	return touchVerdict{}, nil
}

func fmtNS(ns int64) string { return time.Unix(0, ns).UTC().Format(time.RFC3339Nano) }

// addTouchSteps appends a touch step for each touch to apply, and one for
// every host dir in which the commit only swaps entries (a modify's new
// content renamed over the old, the old deleted by finish): natively a file
// changed in place leaves its dir's mtime alone, so that dir gets back the
// mtime it has now. A dir where the commit adds or removes names keeps the
// commit's time, unless the trial touched it.
func (pl *plan) addTouchSteps(dirs *dirs, keep []dryexec.FileChange) error {
	touchedDirs := map[string]bool{}
	for _, t := range keep {
		if t.Kind == dryexec.KindDir {
			touchedDirs[t.Path] = true
		}
	}
	entries, swapped := map[string]bool{}, map[string]bool{}
	for _, s := range pl.steps {
		switch {
		case s.Kind == stepRemove || s.Kind == stepMkdir || (s.Kind == stepPlace && !s.Replace):
			entries[parentDir(s.Path)] = true
		case s.Kind == stepPlace:
			swapped[parentDir(s.Path)] = true
		}
	}
	var keepDirs []string
	for d := range swapped {
		if !entries[d] && !touchedDirs[d] && !pl.created[d] && d != "/" {
			keepDirs = append(keepDirs, d)
		}
	}
	slices.Sort(keepDirs)
	for _, t := range keep {
		pl.steps = append(pl.steps, touchStep(t))
	}
	for _, d := range keepDirs {
		fd, err := dirs.open(d)
		if err != nil {
			return fmt.Errorf("commit: opening %s: %w", dryexec.QuotePath(d), err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return fmt.Errorf("commit: stat %s: %w", dryexec.QuotePath(d), err)
		}
		pl.steps = append(pl.steps, step{Kind: stepTouch, Path: d, FileKnd: dryexec.KindDir, Mtime: st.Mtim.Nano()})
	}
	return nil
}

// applyTouches sets the mtimes of j's touch steps: files, symlinks and FIFOs,
// then dirs deepest first. It is part of finishing an applied commit, so it is
// best effort: a path that is no longer what the trial touched, or whose
// mtime the committer may not set (someone else's, rootless), keeps its own.
// It reports whether it set any.
func applyTouches(j *journal, dirs *dirs) bool {
	var ds []step
	set := false
	for _, s := range j.Steps {
		switch {
		case s.Kind != stepTouch:
		case s.FileKnd == dryexec.KindDir:
			ds = append(ds, s)
		default:
			set = touchOne(s, dirs) == nil || set
		}
	}
	sortByDepth(ds, true)
	for _, s := range ds {
		set = touchOne(s, dirs) == nil || set
	}
	return set
}

// errNotTouched: the path is no longer what the trial touched.
var errNotTouched = errors.New("not what the trial touched")

// touchOne sets s.Path's mtime to s.Mtime if it is still what the trial
// touched. A file's content is re-hashed through the descriptor whose mtime
// is then set.
func touchOne(s step, dirs *dirs) error {
	dfd, err := dirs.open(parentDir(s.Path))
	if err != nil {
		return err
	}
	name := path.Base(s.Path)
	if s.FileKnd == dryexec.KindFile {
		fd, err := unix.Openat(dfd, name, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
		if err != nil {
			return err
		}
		f := os.NewFile(uintptr(fd), name)
		defer f.Close()
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return err
		}
		if kindOf(st.Mode) != dryexec.KindFile || st.Size != s.Size {
			return errNotTouched
		}
		h := sha256.New()
		if _, err := io.Copy(h, f); err != nil {
			return err
		}
		if hex.EncodeToString(h.Sum(nil)) != s.SHA {
			return errNotTouched
		}
		return setMtime(dfd, name, fd, s.Mtime)
	}
	var st unix.Stat_t
	if err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	if kindOf(st.Mode) != s.FileKnd {
		return errNotTouched
	}
	if s.FileKnd == dryexec.KindSymlink {
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(dfd, name, buf)
		if err != nil || string(buf[:n]) != s.Link {
			return errNotTouched
		}
	}
	return setMtime(dfd, name, -1, s.Mtime)
}
