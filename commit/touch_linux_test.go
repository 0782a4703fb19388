package commit

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
)

// old is the mtime every host path of these tests starts with.
var old = time.Date(2020, 1, 2, 3, 4, 5, 6, time.UTC).UnixNano()

// trialNS is the i-th mtime a trial left: distinct, after old, with
// nanoseconds.
func trialNS(i int) int64 {
	return time.Date(2026, 5, 6, 7, 8, 9, 0, time.UTC).UnixNano() + int64(i)*1_000_000_007
}

// age gives every path under f.root, and f.root, the mtime old.
func (f *fx) age() {
	f.t.Helper()
	ts := []unix.Timespec{unix.NsecToTimespec(old), unix.NsecToTimespec(old)}
	err := filepath.WalkDir(f.root, func(p string, _ os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW)
	})
	if err != nil {
		f.t.Fatal(err)
	}
}

// mtime is rel's mtime on the host now ("" is f.root).
func (f *fx) mtime(rel string) int64 {
	f.t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(f.p(rel), &st); err != nil {
		f.t.Fatal(err)
	}
	return st.Mtim.Nano()
}

// touched is what fsdelta reports for host path rel, as it is now, left
// with mtime ns by the trial.
func (f *fx) touched(rel string, ns int64) dryexec.FileChange {
	f.t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(f.p(rel), &st); err != nil {
		f.t.Fatal(err)
	}
	fc := dryexec.FileChange{Path: f.p(rel), Op: dryexec.OpTouch, Kind: kindOf(st.Mode), Mode: modeStr(st.Mode & 0o7777),
		UID: int(st.Uid), GID: int(st.Gid), MtimeNS: ns, BeforeMtimeNS: st.Mtim.Nano()}
	switch fc.Kind {
	case dryexec.KindFile:
		b, err := os.ReadFile(f.p(rel))
		if err != nil {
			f.t.Fatal(err)
		}
		fc.SHA256, fc.Size = sha(string(b)), int64(len(b))
	case dryexec.KindSymlink:
		l, err := os.Readlink(f.p(rel))
		if err != nil {
			f.t.Fatal(err)
		}
		fc.LinkTarget, fc.Size, fc.Mode = l, int64(len(l)), "0777"
	}
	return fc
}

// deltaT is f.delta with touched paths.
func (f *fx) deltaT(touched changeList, changes ...dryexec.FileChange) *dryexec.StateDelta {
	d := f.delta(changes...)
	d.Touched = touched
	return d
}

// mtimes is every path's mtime under f.root (f.root itself as ".").
func (f *fx) mtimes() map[string]int64 {
	f.t.Helper()
	out := map[string]int64{}
	filepath.WalkDir(f.root, func(p string, _ os.DirEntry, err error) error {
		if err == nil {
			rel, _ := filepath.Rel(f.root, p)
			var st unix.Stat_t
			if unix.Lstat(p, &st) == nil {
				out[rel] = st.Mtim.Nano()
			}
		}
		return nil
	})
	return out
}

func (f *fx) wantMtimes(what string, want map[string]int64) {
	f.t.Helper()
	for rel, ns := range want {
		if rel == "" {
			rel = "."
		}
		if got := f.mtime(rel); got != ns {
			f.t.Errorf("%s: %s has mtime %s, want %s", what, rel, time.Unix(0, got).UTC().Format(time.RFC3339Nano),
				time.Unix(0, ns).UTC().Format(time.RFC3339Nano))
		}
	}
}

var touchTree = common.with("a", reg("a\n", 0o644), "d", dir(0o755), "d/b", reg("b\n", 0o600), "ln", sym("a"),
	"p", fifo(0o600), "e", dir(0o750), "e/x", reg("x\n", 0o644), "m", reg("m\n", 0o644), "q", dir(0o755),
	"q/y", reg("y\n", 0o644))

// TestTouchedMtimes: commit sets the trial's mtime on every touched file,
// symlink, FIFO and dir, exactly, leaving content and inode alone, and after
// its own changes in those dirs; a host dir in which it only replaced a
// file's content keeps the mtime it had, as natively (a write in place does
// not move a dir's mtime).
func TestTouchedMtimes(t *testing.T) {
	requireRoot(t)
	f := newFx(t, touchTree)
	f.age()
	inoA := f.hostSnap()["a"].ino
	d := f.deltaT(changeList{
		f.touched("a", trialNS(1)), f.touched("d", trialNS(2)), f.touched("d/b", trialNS(3)),
		f.touched("e", trialNS(4)), f.touched("ln", trialNS(5)), f.touched("p", trialNS(6)),
	},
		at(f.create("d/new", "new\n", 0o644), trialNS(7)),
		at(f.modify("e/x", "x\n", 0o644, "x2\n", 0o644), trialNS(8)),
		at(f.modify("m", "m\n", 0o644, "m2\n", 0o644), trialNS(9)),
		at(f.modify("q/y", "y\n", 0o644, "y2\n", 0o644), trialNS(10)),
	)
	if _, err := Apply(context.Background(), d, f.opt()); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	wantTree(t, "host", touchTree.with("d/new", reg("new\n", 0o644), "e/x", reg("x2\n", 0o644), "m", reg("m2\n", 0o644),
		"q/y", reg("y2\n", 0o644)), f.hostSnap(), false)
	f.wantMtimes("after commit", map[string]int64{
		"a": trialNS(1), "d": trialNS(2), "d/b": trialNS(3), "e": trialNS(4), "ln": trialNS(5), "p": trialNS(6),
		"d/new": trialNS(7), "e/x": trialNS(8), "m": trialNS(9), "q/y": trialNS(10),
		"q": old, "": old, "keepdir": old,
	})
	if ino := f.hostSnap()["a"].ino; ino != inoA {
		t.Errorf("touched a was replaced (inode %d, was %d)", ino, inoA)
	}
	noLeftovers(t, f.base, f.jdir)
}

// TestTouchedConflicts: a touched path is checked like a modify. If the host
// changed it since the trial started (content, size, mtime, mode, kind,
// target, existence), the commit is refused, naming it, and nothing at all is
// applied; forced, a touch whose content or kind is no longer the trial's is
// left out (its content is not kept: the trial's state cannot be reached),
// and one whose mtime or mode moved is applied. A touched dir whose entries
// changed on the host keeps the host's later mtime, without a conflict.
func TestTouchedConflicts(t *testing.T) {
	requireRoot(t)
	cases := []struct {
		name      string
		path      string
		host      func(f *fx)
		conflict  string // the reason holds it; "" for no conflict
		forcedSet bool   // forced, the trial's mtime is set
	}{
		{"content changed, same size", "a", func(f *fx) { os.WriteFile(f.p("a"), []byte("A\n"), 0o644) }, "content changed", false},
		{"content changed, other size", "a", func(f *fx) { os.WriteFile(f.p("a"), []byte("longer\n"), 0o644) }, "content changed", false},
		{"mtime moved", "a", func(f *fx) { os.Chtimes(f.p("a"), time.Now(), time.Now()) }, "mtime moved", true},
		{"mode changed", "a", func(f *fx) { os.Chmod(f.p("a"), 0o600) }, "mode is 0600", true},
		{"deleted", "a", func(f *fx) { os.Remove(f.p("a")) }, "no longer has it", false},
		{"a dir now", "a", func(f *fx) { os.Remove(f.p("a")); os.Mkdir(f.p("a"), 0o755) }, "the host has a dir now", false},
		{"symlink retargeted", "ln", func(f *fx) { os.Remove(f.p("ln")); os.Symlink("m", f.p("ln")) }, "points elsewhere", false},
		{"fifo now a file", "p", func(f *fx) { os.Remove(f.p("p")); os.WriteFile(f.p("p"), nil, 0o600) }, "the host has a file now", false},
		{"dir's entries changed", "d", func(f *fx) { os.WriteFile(f.p("d/z"), nil, 0o644) }, "", false},
	}
	for _, c := range cases {
		for _, force := range []bool{false, true} {
			name := c.name
			if force {
				name += "/forced"
			}
			t.Run(name, func(t *testing.T) {
				f := newFx(t, touchTree)
				f.age()
				d := f.deltaT(changeList{f.touched(c.path, trialNS(1)), f.touched("m", trialNS(2))},
					at(f.create("new.txt", "new\n", 0o644), trialNS(3)))
				c.host(f)
				snap, times := f.hostSnap(), f.mtimes()
				opt := f.opt()
				opt.Force = force
				_, err := Apply(context.Background(), d, opt)
				if c.conflict != "" && !force {
					var ce *dryexec.CommitConflictError
					if !errors.As(err, &ce) || len(ce.Conflicts) != 1 || ce.Conflicts[0].Path != f.p(c.path) ||
						!strings.Contains(ce.Conflicts[0].Reason, c.conflict) {
						t.Fatalf("Apply: %v; want one conflict at %s saying %q", err, c.path, c.conflict)
					}
					wantTree(t, "host after a refused commit", snap, f.hostSnap(), true)
					for rel, ns := range times {
						if got := f.mtime(rel); got != ns {
							t.Errorf("refused commit moved the mtime of %s", rel)
						}
					}
					noLeftovers(t, f.base, f.jdir)
					return
				}
				if err != nil {
					t.Fatalf("Apply: %v", err)
				}
				want := map[string]int64{"m": trialNS(2), "new.txt": trialNS(3)}
				if c.forcedSet && force {
					want[c.path] = trialNS(1)
				} else if ns, ok := times[c.path]; ok {
					want[c.path] = ns // the host's own, left alone
				}
				f.wantMtimes("after commit", want)
				noLeftovers(t, f.base, f.jdir)
			})
		}
	}
}

// TestTouchedPaths: commit ID PATH… selects touched paths like changes: at or
// under a path named; a path with only a touch beneath it is a valid choice,
// one with nothing is not.
func TestTouchedPaths(t *testing.T) {
	requireRoot(t)
	cases := []struct {
		name    string
		paths   []string
		set     []string // touched paths whose mtime is the trial's after
		created bool     // d/new is created
		err     string
	}{
		{"a touched file alone", []string{"d/b"}, []string{"d/b"}, false, ""},
		{"a dir", []string{"d"}, []string{"d", "d/b"}, true, ""},
		{"the other file", []string{"a"}, []string{"a"}, false, ""},
		{"the new file only", []string{"d/new"}, nil, true, ""},
		{"all", nil, []string{"a", "d", "d/b"}, true, ""},
		{"nothing there", []string{"q"}, nil, false, "changed nothing at or under"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFx(t, touchTree)
			f.age()
			ns := map[string]int64{"a": trialNS(1), "d": trialNS(2), "d/b": trialNS(3)}
			d := f.deltaT(changeList{f.touched("a", ns["a"]), f.touched("d", ns["d"]), f.touched("d/b", ns["d/b"])},
				f.create("d/new", "new\n", 0o644))
			opt := f.opt()
			for _, p := range c.paths {
				opt.Paths = append(opt.Paths, f.p(p))
			}
			_, err := Apply(context.Background(), d, opt)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("Apply: %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			for _, p := range []string{"a", "d", "d/b"} {
				want := old
				for _, s := range c.set {
					if s == p {
						want = ns[p]
					}
				}
				if p == "d" && c.created && want == old {
					continue // the commit made an entry in it: its own time
				}
				f.wantMtimes("after commit", map[string]int64{p: want})
			}
			if _, err := os.Lstat(f.p("d/new")); (err == nil) != c.created {
				t.Errorf("d/new created: %v, want %v", err == nil, c.created)
			}
		})
	}
}

// TestTouchedBadDeltas: a touched list no Differ makes is refused before the
// host is touched.
func TestTouchedBadDeltas(t *testing.T) {
	requireRoot(t)
	cases := []struct {
		name string
		bad  func(f *fx, t dryexec.FileChange) (dryexec.FileChange, changeList)
		err  string
	}{
		{"another op", func(f *fx, t dryexec.FileChange) (dryexec.FileChange, changeList) {
			t.Op = dryexec.OpModify
			return t, nil
		}, "op"},
		{"no mtime", func(f *fx, t dryexec.FileChange) (dryexec.FileChange, changeList) { t.MtimeNS = 0; return t, nil }, "no mtime"},
		{"relative path", func(f *fx, t dryexec.FileChange) (dryexec.FileChange, changeList) { t.Path = "a"; return t, nil }, "bad path"},
		{"unclean path", func(f *fx, t dryexec.FileChange) (dryexec.FileChange, changeList) {
			t.Path = f.root + "/d/../a"
			return t, nil
		}, "bad path"},
		{"a device", func(f *fx, t dryexec.FileChange) (dryexec.FileChange, changeList) {
			t.Kind = dryexec.KindOther
			return t, nil
		}, "kind"},
		{"no hash", func(f *fx, t dryexec.FileChange) (dryexec.FileChange, changeList) { t.SHA256 = ""; return t, nil }, "sha256"},
		{"also changed", func(f *fx, t dryexec.FileChange) (dryexec.FileChange, changeList) {
			return t, changeList{f.modify("a", "a\n", 0o644, "b\n", 0o644)}
		}, "twice"},
		{"beneath a replaced dir", func(f *fx, _ dryexec.FileChange) (dryexec.FileChange, changeList) {
			return f.touched("d/b", trialNS(1)), changeList{f.del("d/b", "b\n", 0o600), f.rmdir("d", 0o755), f.mkdir("d", 0o755)}
		}, "beneath"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFx(t, touchTree)
			f.age()
			tc, changes := c.bad(f, f.touched("a", trialNS(1)))
			d := f.deltaT(changeList{tc}, append(changes, f.create("new.txt", "n\n", 0o644))...)
			snap, times := f.hostSnap(), f.mtimes()
			_, err := Apply(context.Background(), d, f.opt())
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Fatalf("Apply: %v, want an error saying %q", err, c.err)
			}
			wantTree(t, "host", snap, f.hostSnap(), true)
			for rel, ns := range times {
				if f.mtime(rel) != ns {
					t.Errorf("the refused commit moved the mtime of %s", rel)
				}
			}
		})
	}
}

// TestTouchedCrash stops a commit with touched paths at every numbered point:
// rolled back, no mtime moved; rolled forward (Recover finishes it), every
// mtime is the trial's, and the dir whose file was replaced has its own.
func TestTouchedCrash(t *testing.T) {
	requireRoot(t)
	after := touchTree.with("m", reg("m2\n", 0o644), "d/new", reg("new\n", 0o644))
	var back, fwd int
	for n := 1; ; n++ {
		f := newFx(t, touchTree)
		f.age()
		d := f.deltaT(changeList{f.touched("a", trialNS(1)), f.touched("d", trialNS(2)), f.touched("ln", trialNS(3))},
			at(f.modify("m", "m\n", 0o644, "m2\n", 0o644), trialNS(4)), at(f.create("d/new", "new\n", 0o644), trialNS(5)))
		before, times := f.hostSnap(), f.mtimes()
		forward := map[string]int64{"a": trialNS(1), "d": trialNS(2), "ln": trialNS(3), "m": trialNS(4), "d/new": trialNS(5), "": old}
		crashed, state := crashAt(t, f, d, n, false)
		if !crashed {
			wantTree(t, "host after a full Apply", after, f.hostSnap(), false)
			f.wantMtimes("after a full Apply", forward)
			break
		}
		if checkRecovered(t, f, n, state, before, after) {
			fwd++
			f.wantMtimes("rolled forward", forward)
		} else {
			back++
			f.wantMtimes("rolled back", map[string]int64{"a": times["a"], "ln": times["ln"]})
		}
		if t.Failed() {
			return
		}
	}
	if back == 0 || fwd == 0 {
		t.Errorf("%d crashes rolled back, %d forward; want both", back, fwd)
	}
}
