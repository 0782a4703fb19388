package commit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/testreq"
)

func requireRoot(t testing.TB) {
	t.Helper()
	testreq.NeedRoot(t)
}

func TestApply(t *testing.T) {
	requireRoot(t)
	for _, c := range applyCases() {
		t.Run(c.name, func(t *testing.T) {
			f := newFx(t, c.before)
			outside := f.outsideSnap()
			wantTree(t, "tree built from before", c.before, f.hostSnap(), false)
			d := f.delta(c.changes(f)...)
			opt := f.opt()
			opt.Force = c.force
			got, err := Apply(context.Background(), d, opt)
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if len(got) != len(d.Files) {
				t.Errorf("Apply returned %d changes, want %d", len(got), len(d.Files))
			}
			wantTree(t, "host after Apply", c.after, f.hostSnap(), false)
			wantTree(t, "outside dir", outside, f.outsideSnap(), true)
			noLeftovers(t, f.base, f.jdir)
		})
	}
}

// TestFinishDoesNotFollowSymlinks: a dir replaced by a symlink; the backups of
// what the dir held were named inside it, so removing them by path after the
// swap would go through the new symlink into whatever it points at.
func TestFinishDoesNotFollowSymlinks(t *testing.T) {
	requireRoot(t)
	before := tree{"dl": dir(0o755), "dl/a": reg("a\n", 0o644), "dl/s": dir(0o755), "dl/s/b": reg("b\n", 0o644)}
	f := newFx(t, before)
	d := f.delta(f.del("dl/s/b", "b\n", 0o644), f.rmdir("dl/s", 0o755), f.del("dl/a", "a\n", 0o644),
		f.rmdir("dl", 0o755), f.symlink("dl", "../outside"))
	pl, err := makePlan(testTrial, d.Files)
	if err != nil {
		t.Fatal(err)
	}
	// Plant, in the symlink's target, every name the commit uses inside dl.
	for _, s := range pl.steps {
		for _, n := range []string{s.Backup, s.Temp} {
			if n != "" && filepath.Dir(n) != f.root {
				rel, _ := filepath.Rel(f.p("dl"), n)
				bait := filepath.Join(f.outside, rel)
				os.MkdirAll(filepath.Dir(bait), 0o755)
				if err := os.WriteFile(bait, []byte("bait\n"), 0o644); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	outside := f.outsideSnap()
	if _, err := Apply(context.Background(), d, f.opt()); err != nil {
		t.Fatal(err)
	}
	wantTree(t, "host", tree{"dl": sym("../outside")}, f.hostSnap(), false)
	wantTree(t, "outside dir (the new symlink's target)", outside, f.outsideSnap(), true)
}

func TestSelectivePaths(t *testing.T) {
	requireRoot(t)
	five := common.with("f1", reg("1\n", 0o644), "f2", reg("2\n", 0o644), "f3", reg("3\n", 0o644),
		"f4", reg("4\n", 0o644), "f5", reg("5\n", 0o644))
	modifyFive := func(f *fx) changeList {
		var out changeList
		for _, n := range []string{"1", "2", "3", "4", "5"} {
			out = append(out, f.modify("f"+n, n+"\n", 0o644, n+" new\n", 0o644))
		}
		return out
	}
	withDirs := common.with("top", reg("top\n", 0o644), "d", dir(0o755), "d/y", reg("y\n", 0o644),
		"d/old", dir(0o755), "d/old/z", reg("z\n", 0o644), "dd", dir(0o755), "dd/w", reg("w\n", 0o644))
	dirChanges := func(f *fx) changeList {
		return changeList{
			f.modify("top", "top\n", 0o644, "top new\n", 0o644),
			f.modify("d/y", "y\n", 0o644, "y new\n", 0o644),
			f.mkdir("d/new", 0o755), f.create("d/new/x", "x\n", 0o644),
			f.del("d/old/z", "z\n", 0o644), f.rmdir("d/old", 0o755),
			// dd is not under d, though "dd" starts with "d".
			f.modify("dd/w", "w\n", 0o644, "w new\n", 0o644),
		}
	}
	newDirs := func(f *fx) changeList {
		return changeList{
			f.mkdir("n", 0o755), f.mkdir("n/m", 0o750), f.create("n/m/f", "f\n", 0o644),
			f.create("n/other", "o\n", 0o644), f.mkdir("n/m/k", 0o755),
			f.create("keepdir/also", "also\n", 0o644),
		}
	}
	replaced := func(f *fx) changeList {
		return changeList{
			f.del("x", "x\n", 0o644), f.mkdir("x", 0o755), f.create("x/a", "a\n", 0o644), f.create("x/b", "b\n", 0o644),
		}
	}
	cases := []struct {
		name    string
		before  tree
		changes func(f *fx) changeList
		paths   []string
		after   tree
		nApply  int
		err     string
	}{
		{
			name: "one file of five", before: five, changes: modifyFive, paths: []string{"f3"},
			after: five.with("f3", reg("3 new\n", 0o644)), nApply: 1,
		},
		{
			name: "two files of five", before: five, changes: modifyFive, paths: []string{"f5", "f1"},
			after: five.with("f1", reg("1 new\n", 0o644), "f5", reg("5 new\n", 0o644)), nApply: 2,
		},
		{
			name: "a dir selects everything beneath", before: withDirs, changes: dirChanges, paths: []string{"d"},
			after: common.with("top", reg("top\n", 0o644), "d", dir(0o755), "d/y", reg("y new\n", 0o644),
				"d/new", dir(0o755), "d/new/x", reg("x\n", 0o644), "dd", dir(0o755), "dd/w", reg("w\n", 0o644)),
			nApply: 5,
		},
		{
			name: "a removed dir selects its contents", before: withDirs, changes: dirChanges, paths: []string{"d/old"},
			after:  withDirs.with("d/old", node{}, "d/old/z", node{}),
			nApply: 2,
		},
		{
			name: "a file in a new dir pulls in its mkdirs", before: common, changes: newDirs, paths: []string{"n/m/f"},
			after:  common.with("n", dir(0o755), "n/m", dir(0o750), "n/m/f", reg("f\n", 0o644)),
			nApply: 3,
		},
		{
			name: "a file in a dir that replaced a file pulls in the replacement", before: common.with("x", reg("x\n", 0o644)),
			changes: replaced, paths: []string{"x/b"},
			after:  common.with("x", dir(0o755), "x/b", reg("b\n", 0o644)),
			nApply: 3,
		},
		{
			name: "a path the trial never changed", before: five, changes: modifyFive, paths: []string{"f3", "keep.txt"},
			err: "changed nothing",
		},
		{
			name: "a path the trial never changed, under a changed dir", before: withDirs, changes: dirChanges,
			paths: []string{"d/nothing"}, err: "changed nothing",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFx(t, c.before)
			d := f.delta(c.changes(f)...)
			opt := f.opt()
			for _, p := range c.paths {
				opt.Paths = append(opt.Paths, f.p(p))
			}
			before := f.hostSnap()
			got, err := Apply(context.Background(), d, opt)
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("Apply: %v, want an error with %q", err, c.err)
				}
				wantTree(t, "host after a refused commit", before, f.hostSnap(), true)
				noLeftovers(t, f.base, f.jdir)
				return
			}
			if err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if len(got) != c.nApply {
				t.Errorf("Apply returned %d changes, want %d: %v", len(got), c.nApply, got)
			}
			wantTree(t, "host after a selective commit", c.after, f.hostSnap(), false)
			noLeftovers(t, f.base, f.jdir)
		})
	}
}

func conflictPaths(t *testing.T, err error) []string {
	t.Helper()
	var ce *dryexec.CommitConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("error %v (%T) is not a *CommitConflictError", err, err)
	}
	if !errors.Is(err, dryexec.ErrCommitConflict) {
		t.Errorf("errors.Is(err, ErrCommitConflict) is false")
	}
	if ce.TrialID != testTrial {
		t.Errorf("conflict names trial %q", ce.TrialID)
	}
	var out []string
	for _, c := range ce.Conflicts {
		if c.Reason == "" {
			t.Errorf("conflict at %s has no reason", c.Path)
		}
		out = append(out, c.Path)
	}
	return out
}

func TestConflicts(t *testing.T) {
	requireRoot(t)
	base := common.with("a", reg("a\n", 0o644), "b", reg("b\n", 0o644), "c", reg("c\n", 0o644),
		"d", dir(0o755), "d/x", reg("x\n", 0o644), "l", sym("a"))
	// Besides the change that conflicts, each delta holds harmless changes that
	// must not be applied either.
	harmless := func(f *fx) changeList {
		return changeList{f.create("fresh", "fresh\n", 0o644), f.mkdir("nd", 0o755), f.create("nd/f", "f\n", 0o644),
			f.del("c", "c\n", 0o644)}
	}
	cases := []struct {
		name    string
		host    func(f *fx) // what happened on the host after the trial
		changes func(f *fx) changeList
		want    []string // conflicting paths, relative
	}{
		{
			name:    "host file edited after the trial",
			host:    func(f *fx) { os.WriteFile(f.p("a"), []byte("edited\n"), 0o644) },
			changes: func(f *fx) changeList { return changeList{f.modify("a", "a\n", 0o644, "trial\n", 0o644)} },
			want:    []string{"a"},
		},
		{
			name:    "edited file the trial deleted",
			host:    func(f *fx) { os.WriteFile(f.p("a"), []byte("edited\n"), 0o644) },
			changes: func(f *fx) changeList { return changeList{f.del("a", "a\n", 0o644)} },
			want:    []string{"a"},
		},
		{
			name:    "mode changed under a modify",
			host:    func(f *fx) { os.Chmod(f.p("a"), 0o600) },
			changes: func(f *fx) changeList { return changeList{f.modify("a", "a\n", 0o644, "trial\n", 0o644)} },
			want:    []string{"a"},
		},
		{
			name:    "mode changed under a chmod",
			host:    func(f *fx) { os.Chmod(f.p("a"), 0o600) },
			changes: func(f *fx) changeList { return changeList{f.chmodFile("a", "a\n", 0o644, 0o755)} },
			want:    []string{"a"},
		},
		{
			name: "owner changed under a chown",
			host: func(f *fx) { os.Chown(f.p("a"), 4, 4) },
			changes: func(f *fx) changeList {
				return changeList{chowned(f.chmodFile("a", "a\n", 0o644, 0o644), 0, 0, 65534, 0)}
			},
			want: []string{"a"},
		},
		{
			name: "owner changed under a modify that chowns",
			host: func(f *fx) { os.Chown(f.p("a"), 0, 4) },
			changes: func(f *fx) changeList {
				return changeList{chowned(f.modify("a", "a\n", 0o644, "t\n", 0o644), 0, 0, 65534, 0)}
			},
			want: []string{"a"},
		},
		{
			name:    "symlink owner changed under an lchown",
			host:    func(f *fx) { os.Lchown(f.p("l"), 5, 5) },
			changes: func(f *fx) changeList { return changeList{f.chownLink("l", "a", 0, 0, 65534, 0)} },
			want:    []string{"l"},
		},
		{
			name:    "dir mode changed under a chmod",
			host:    func(f *fx) { os.Chmod(f.p("d"), 0o700) },
			changes: func(f *fx) changeList { return changeList{f.chmodDir("d", 0o755, 0o750)} },
			want:    []string{"d"},
		},
		{
			name:    "file deleted on the host",
			host:    func(f *fx) { os.Remove(f.p("a")) },
			changes: func(f *fx) changeList { return changeList{f.modify("a", "a\n", 0o644, "trial\n", 0o644)} },
			want:    []string{"a"},
		},
		{
			name:    "file created where the trial created one",
			host:    func(f *fx) { os.WriteFile(f.p("new"), []byte("host's\n"), 0o644) },
			changes: func(f *fx) changeList { return changeList{f.create("new", "trial's\n", 0o644)} },
			want:    []string{"new"},
		},
		{
			name:    "dir created where the trial created one",
			host:    func(f *fx) { os.Mkdir(f.p("nd2"), 0o755) },
			changes: func(f *fx) changeList { return changeList{f.mkdir("nd2", 0o755), f.create("nd2/f", "f\n", 0o644)} },
			want:    []string{"nd2"},
		},
		{
			name:    "symlink created where the trial created one",
			host:    func(f *fx) { os.Symlink("x", f.p("ln")) },
			changes: func(f *fx) changeList { return changeList{f.symlink("ln", "x")} },
			want:    []string{"ln"},
		},
		{
			name:    "extra file inside a dir the trial rmdir's",
			host:    func(f *fx) { os.WriteFile(f.p("d/extra"), []byte("mine\n"), 0o644) },
			changes: func(f *fx) changeList { return changeList{f.del("d/x", "x\n", 0o644), f.rmdir("d", 0o755)} },
			want:    []string{"d"},
		},
		{
			name:    "symlink retargeted",
			host:    func(f *fx) { os.Remove(f.p("l")); os.Symlink("b", f.p("l")) },
			changes: func(f *fx) changeList { return changeList{f.delLink("l", "a")} },
			want:    []string{"l"},
		},
		{
			name:    "file replaced by a dir",
			host:    func(f *fx) { os.Remove(f.p("a")); os.Mkdir(f.p("a"), 0o644) },
			changes: func(f *fx) changeList { return changeList{f.modify("a", "a\n", 0o644, "trial\n", 0o644)} },
			want:    []string{"a"},
		},
		{
			name: "parent dir removed",
			host: func(f *fx) { os.RemoveAll(f.p("d")) },
			changes: func(f *fx) changeList {
				return changeList{f.modify("d/x", "x\n", 0o644, "trial\n", 0o644), f.create("d/y", "y\n", 0o644)}
			},
			want: []string{"d/x", "d/y"},
		},
		{
			name: "every conflict is listed",
			host: func(f *fx) {
				os.WriteFile(f.p("a"), []byte("edited\n"), 0o644)
				os.Remove(f.p("b"))
				os.WriteFile(f.p("new"), []byte("host's\n"), 0o644)
				os.WriteFile(f.p("d/extra"), []byte("mine\n"), 0o644)
			},
			changes: func(f *fx) changeList {
				return changeList{
					f.modify("a", "a\n", 0o644, "trial\n", 0o644), f.del("b", "b\n", 0o644),
					f.create("new", "trial's\n", 0o644), f.del("d/x", "x\n", 0o644), f.rmdir("d", 0o755),
				}
			},
			want: []string{"a", "b", "d", "new"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFx(t, base)
			changes := append(c.changes(f), harmless(f)...)
			c.host(f)
			before, outside := f.hostSnap(), f.outsideSnap()
			_, err := Apply(context.Background(), f.delta(changes...), f.opt())
			var want []string
			for _, p := range c.want {
				want = append(want, f.p(p))
			}
			if got := conflictPaths(t, err); !slices.Equal(got, want) {
				t.Errorf("conflicts at %v, want %v\n%v", got, want, err)
			}
			wantTree(t, "host after a conflict", before, f.hostSnap(), true)
			wantTree(t, "outside dir", outside, f.outsideSnap(), true)
			noLeftovers(t, f.base, f.jdir)
		})
	}
}

// TestUnsafeParent: a host dir the trial wrote into became a symlink. Commit
// must refuse, even when forced, and write nothing where the symlink points.
func TestUnsafeParent(t *testing.T) {
	requireRoot(t)
	base := common.with("w", dir(0o755), "w/f", reg("f\n", 0o644), "w/sub", dir(0o755), "w/sub/g", reg("g\n", 0o644))
	cases := []struct {
		name    string
		changes func(f *fx) changeList
	}{
		{"create in it", func(f *fx) changeList { return changeList{f.create("w/new", "new\n", 0o644)} }},
		{"modify in it", func(f *fx) changeList { return changeList{f.modify("w/f", "f\n", 0o644, "x\n", 0o644)} }},
		{"delete in it", func(f *fx) changeList { return changeList{f.del("w/f", "f\n", 0o644)} }},
		{"chmod in it", func(f *fx) changeList { return changeList{f.chmodFile("w/f", "f\n", 0o644, 0o600)} }},
		{"deeper", func(f *fx) changeList { return changeList{f.modify("w/sub/g", "g\n", 0o644, "x\n", 0o644)} }},
		{"mkdir in it", func(f *fx) changeList {
			return changeList{f.mkdir("w/n", 0o755), f.create("w/n/f", "f\n", 0o644)}
		}},
		{"symlink in it", func(f *fx) changeList { return changeList{f.symlink("w/ln", "/etc/passwd")} }},
	}
	for _, c := range cases {
		for _, force := range []bool{false, true} {
			for _, walk := range []bool{false, true} {
				name := c.name
				if force {
					name += ", forced"
				}
				if walk {
					name += ", walkBeneath"
				}
				t.Run(name, func(t *testing.T) {
					f := newFx(t, base)
					changes := append(changeList{f.create("fine", "fine\n", 0o644)}, c.changes(f)...)
					// The host's w moves into the outside dir and a symlink takes its place.
					if err := os.Rename(f.p("w"), filepath.Join(f.outside, "w")); err != nil {
						t.Fatal(err)
					}
					if err := os.Symlink(filepath.Join(f.outside, "w"), f.p("w")); err != nil {
						t.Fatal(err)
					}
					before, outside := f.hostSnap(), f.outsideSnap()
					opt := f.opt()
					opt.Force = force
					opt.ForcePaths = []string{f.p("w")}
					opt.walkDirs = walk
					_, err := Apply(context.Background(), f.delta(changes...), opt)
					if !errors.Is(err, dryexec.ErrUnsafePath) {
						t.Fatalf("Apply: %v, want ErrUnsafePath", err)
					}
					var ce *dryexec.CommitConflictError
					if errors.As(err, &ce) {
						t.Errorf("an unsafe path is reported as a conflict: %v", err)
					}
					wantTree(t, "host", before, f.hostSnap(), true)
					wantTree(t, "symlink target", outside, f.outsideSnap(), true)
					noLeftovers(t, f.base, f.jdir)
				})
			}
		}
	}
}

func TestForce(t *testing.T) {
	requireRoot(t)
	base := common.with("a", reg("a\n", 0o644), "b", reg("b\n", 0o644), "d", dir(0o755), "d/x", reg("x\n", 0o644),
		"d/y", reg("y\n", 0o644), "gone", reg("gone\n", 0o644), "e", reg("e\n", 0o644))
	changes := func(f *fx) changeList {
		return changeList{
			f.modify("a", "a\n", 0o644, "trial a\n", 0o644),
			f.modify("b", "b\n", 0o644, "trial b\n", 0o644),
			f.modify("d/x", "x\n", 0o644, "trial x\n", 0o644),
			f.chmodFile("d/y", "y\n", 0o644, 0o600),
			f.create("n", "n\n", 0o644),
		}
	}
	host := func(f *fx) {
		os.WriteFile(f.p("a"), []byte("host a\n"), 0o644)
		os.WriteFile(f.p("b"), []byte("host b\n"), 0o644)
		os.WriteFile(f.p("d/x"), []byte("host x\n"), 0o644)
		os.Chmod(f.p("d/y"), 0o640)
	}
	applied := base.with("a", reg("trial a\n", 0o644), "b", reg("trial b\n", 0o644), "d/x", reg("trial x\n", 0o644),
		"d/y", reg("y\n", 0o600), "n", reg("n\n", 0o644))
	cases := []struct {
		name       string
		force      bool
		forcePaths []string
		conflicts  []string // nil: the commit goes through
	}{
		{name: "not forced", conflicts: []string{"a", "b", "d/x", "d/y"}},
		{name: "one path", forcePaths: []string{"a"}, conflicts: []string{"b", "d/x", "d/y"}},
		{name: "a dir forces beneath it", forcePaths: []string{"d"}, conflicts: []string{"a", "b"}},
		{name: "a prefix that is not a parent", forcePaths: []string{"d/"}, conflicts: []string{"a", "b"}},
		{name: "a sibling name is not forced", forcePaths: []string{"a", "b", "d/x"}, conflicts: []string{"d/y"}},
		{name: "every path", forcePaths: []string{"a", "b", "d"}},
		{name: "Force", force: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFx(t, base)
			d := f.delta(changes(f)...)
			host(f)
			before := f.hostSnap()
			opt := f.opt()
			opt.Force = c.force
			for _, p := range c.forcePaths {
				opt.ForcePaths = append(opt.ForcePaths, f.p(p))
				if strings.HasSuffix(p, "/") {
					opt.ForcePaths[len(opt.ForcePaths)-1] += "/"
				}
			}
			_, err := Apply(context.Background(), d, opt)
			if c.conflicts != nil {
				var want []string
				for _, p := range c.conflicts {
					want = append(want, f.p(p))
				}
				if got := conflictPaths(t, err); !slices.Equal(got, want) {
					t.Errorf("conflicts at %v, want %v", got, want)
				}
				wantTree(t, "host", before, f.hostSnap(), true)
			} else {
				if err != nil {
					t.Fatalf("Apply: %v", err)
				}
				wantTree(t, "host", applied, f.hostSnap(), false)
			}
			noLeftovers(t, f.base, f.jdir)
		})
	}
}

// TestForceExistence: forcing over a path the host removed or created reaches
// the trial's state instead of failing halfway.
func TestForceExistence(t *testing.T) {
	requireRoot(t)
	base := common.with("a", reg("a\n", 0o644), "b", reg("b\n", 0o644), "d", dir(0o755), "d/x", reg("x\n", 0o644))
	cases := []struct {
		name    string
		host    func(f *fx)
		changes func(f *fx) changeList
		after   tree
	}{
		{
			name:    "delete of a file the host deleted",
			host:    func(f *fx) { os.Remove(f.p("a")) },
			changes: func(f *fx) changeList { return changeList{f.del("a", "a\n", 0o644)} },
			after:   base.with("a", node{}),
		},
		{
			name:    "modify of a file the host deleted",
			host:    func(f *fx) { os.Remove(f.p("a")) },
			changes: func(f *fx) changeList { return changeList{f.modify("a", "a\n", 0o644, "trial\n", 0o600)} },
			after:   base.with("a", reg("trial\n", 0o600)),
		},
		{
			name:    "create of a file the host created",
			host:    func(f *fx) { os.WriteFile(f.p("n"), []byte("host\n"), 0o644) },
			changes: func(f *fx) changeList { return changeList{f.create("n", "trial\n", 0o640)} },
			after:   base.with("n", reg("trial\n", 0o640)),
		},
		{
			name:    "symlink where the host created a file",
			host:    func(f *fx) { os.WriteFile(f.p("n"), []byte("host\n"), 0o644) },
			changes: func(f *fx) changeList { return changeList{f.symlink("n", "a")} },
			after:   base.with("n", sym("a")),
		},
		{
			name: "mkdir of a dir the host created",
			host: func(f *fx) { os.Mkdir(f.p("nd"), 0o700) },
			changes: func(f *fx) changeList {
				return changeList{f.mkdir("nd", 0o755), f.create("nd/f", "f\n", 0o644)}
			},
			after: base.with("nd", dir(0o755), "nd/f", reg("f\n", 0o644)),
		},
		{
			name: "rmdir of a dir with an extra file",
			host: func(f *fx) { os.WriteFile(f.p("d/extra"), []byte("e\n"), 0o644) },
			changes: func(f *fx) changeList {
				return changeList{f.del("d/x", "x\n", 0o644), f.rmdir("d", 0o755)}
			},
			after: base.with("d", node{}, "d/x", node{}),
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFx(t, base)
			d := f.delta(c.changes(f)...)
			c.host(f)
			before := f.hostSnap()
			if _, err := Apply(context.Background(), d, f.opt()); !errors.Is(err, dryexec.ErrCommitConflict) {
				t.Fatalf("unforced Apply: %v, want a conflict", err)
			}
			wantTree(t, "host after the unforced commit", before, f.hostSnap(), true)
			opt := f.opt()
			opt.Force = true
			if _, err := Apply(context.Background(), d, opt); err != nil {
				t.Fatalf("forced Apply: %v", err)
			}
			wantTree(t, "host after the forced commit", c.after, f.hostSnap(), false)
			noLeftovers(t, f.base, f.jdir)
		})
	}
}

// TestBadBlobs: content that cannot be read or does not match what was
// reviewed stops the commit and rolls back whatever it did.
func TestBadBlobs(t *testing.T) {
	requireRoot(t)
	five := func(f *fx) changeList {
		return changeList{
			f.modify("a", "a\n", 0o644, "a new\n", 0o644),
			f.create("b", "b\n", 0o644),
			f.create("keepdir/c", "c\n", 0o644),
			f.modify("keep.txt", "keep\n", 0o644, "keep new\n", 0o600),
			f.create("e", "e\n", 0o644),
		}
	}
	// Everything else in these deltas happens before the bad content is read
	// in the new dir, so rollback has real work to do.
	lateInNewDir := func(f *fx) changeList {
		return changeList{
			f.modify("a", "a\n", 0o644, "a new\n", 0o644),
			f.del("gone", "gone\n", 0o644),
			f.chmodFile("keepdir/k1", "k1\n", 0o600, 0o640),
			f.del("x", "x\n", 0o644), f.mkdir("x", 0o755), f.create("x/one", "one\n", 0o644),
			f.mkdir("nd", 0o755), f.create("nd/bad", "bad\n", 0o644),
		}
	}
	before := common.with("a", reg("a\n", 0o644), "gone", reg("gone\n", 0o644), "x", reg("x\n", 0o644))
	cases := []struct {
		name    string
		changes func(f *fx) changeList
		setup   func(f *fx, d *dryexec.StateDelta)
		want    string
	}{
		{name: "3rd of 5 fails to open", changes: five, setup: func(f *fx, d *dryexec.StateDelta) { f.failOpen = 3 },
			want: "injected open failure"},
		{name: "5th of 5 fails to open", changes: five, setup: func(f *fx, d *dryexec.StateDelta) { f.failOpen = 5 },
			want: "injected open failure"},
		{name: "corrupt content", changes: five, setup: func(f *fx, d *dryexec.StateDelta) { f.corrupt[d.Files[2].SHA256] = true },
			want: "does not match"},
		{name: "missing blob", changes: five, setup: func(f *fx, d *dryexec.StateDelta) { delete(f.blobs, d.Files[3].SHA256) },
			want: "content of"},
		{name: "size differs from the delta", changes: five, setup: func(f *fx, d *dryexec.StateDelta) { d.Files[4].Size++ },
			want: "does not match"},
		{name: "no blob store", changes: five, setup: func(f *fx, d *dryexec.StateDelta) { f.blobs = nil },
			want: "content of"},
		{name: "corrupt content in a new dir", changes: lateInNewDir,
			setup: func(f *fx, d *dryexec.StateDelta) { f.corrupt[d.Files[len(d.Files)-1].SHA256] = true },
			want:  "does not match"},
		{name: "open fails in a replaced dir", changes: lateInNewDir,
			setup: func(f *fx, d *dryexec.StateDelta) { delete(f.blobs, d.Files[5].SHA256) },
			want:  "content of"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFx(t, before)
			d := f.delta(c.changes(f)...)
			c.setup(f, d)
			snap := f.hostSnap()
			_, err := Apply(context.Background(), d, f.opt())
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Apply: %v, want an error with %q", err, c.want)
			}
			if strings.Contains(err.Error(), "rolling back failed") {
				t.Errorf("rollback failed: %v", err)
			}
			wantTree(t, "host after a failed commit", snap, f.hostSnap(), true)
			noLeftovers(t, f.base, f.jdir)
		})
	}
	t.Run("nil OpenBlob", func(t *testing.T) {
		f := newFx(t, before)
		d := f.delta(five(f)...)
		snap := f.hostSnap()
		opt := f.opt()
		opt.OpenBlob = nil
		if _, err := Apply(context.Background(), d, opt); err == nil {
			t.Fatal("Apply without OpenBlob succeeded")
		}
		wantTree(t, "host", snap, f.hostSnap(), true)
		noLeftovers(t, f.base, f.jdir)
	})
	t.Run("canceled context", func(t *testing.T) {
		f := newFx(t, before)
		d := f.delta(five(f)...)
		snap := f.hostSnap()
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := Apply(ctx, d, f.opt()); !errors.Is(err, context.Canceled) {
			t.Fatalf("Apply: %v, want context.Canceled", err)
		}
		wantTree(t, "host", snap, f.hostSnap(), true)
		noLeftovers(t, f.base, f.jdir)
	})
}

func TestBadDeltas(t *testing.T) {
	requireRoot(t)
	cases := []struct {
		name   string
		change func(f *fx) dryexec.FileChange
	}{
		{"relative path", func(f *fx) dryexec.FileChange {
			c := f.create("x", "x\n", 0o644)
			c.Path = "relative/x"
			return c
		}},
		{"dot-dot", func(f *fx) dryexec.FileChange {
			c := f.create("x", "x\n", 0o644)
			c.Path = f.root + "/../escape"
			return c
		}},
		{"trailing slash", func(f *fx) dryexec.FileChange {
			c := f.create("x", "x\n", 0o644)
			c.Path += "/"
			return c
		}},
		{"the root", func(f *fx) dryexec.FileChange {
			c := f.rmdir("x", 0o755)
			c.Path = "/"
			return c
		}},
		{"NUL", func(f *fx) dryexec.FileChange {
			c := f.create("x", "x\n", 0o644)
			c.Path += "\x00y"
			return c
		}},
		{"a kind other (socket, device)", func(f *fx) dryexec.FileChange {
			c := f.create("x", "", 0o644)
			c.Kind, c.SHA256 = dryexec.KindOther, ""
			return c
		}},
		{"unknown op", func(f *fx) dryexec.FileChange {
			c := f.create("x", "x\n", 0o644)
			c.Op = "rename"
			return c
		}},
		{"chmod that changes content", func(f *fx) dryexec.FileChange {
			c := f.chmodFile("keep.txt", "keep\n", 0o644, 0o600)
			c.SHA256 = sha("other\n")
			return c
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFx(t, common)
			d := f.delta(f.create("fine", "fine\n", 0o644), c.change(f))
			snap := f.hostSnap()
			if _, err := Apply(context.Background(), d, f.opt()); err == nil {
				t.Fatal("Apply accepted a bad delta")
			}
			wantTree(t, "host", snap, f.hostSnap(), true)
			noLeftovers(t, f.base, f.jdir)
		})
	}
}

func TestRecoverNoJournals(t *testing.T) {
	rec, err := Recover(filepath.Join(t.TempDir(), "never-created"))
	if err != nil || len(rec) != 0 {
		t.Fatalf("Recover of a missing dir: %v, %v", rec, err)
	}
	rec, err = Recover(t.TempDir())
	if err != nil || len(rec) != 0 {
		t.Fatalf("Recover of an empty dir: %v, %v", rec, err)
	}
}

func TestRecoverLeftoverTmp(t *testing.T) {
	dir := t.TempDir()
	tmp := journalPath(dir, testTrial) + ".tmp"
	if err := os.WriteFile(tmp, []byte(`{"trial":"`+testTrial+`","state":"plan`), 0o600); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "unrelated.txt"), []byte("x"), 0o600)
	rec, err := Recover(dir)
	if err != nil || len(rec) != 0 {
		t.Fatalf("Recover: %v, %v", rec, err)
	}
	if _, err := os.Stat(tmp); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the .json.tmp is still there: %v", err)
	}
}

func TestRecoverUnreadable(t *testing.T) {
	for _, c := range []struct{ name, file, body string }{
		{"truncated", testTrial + ".json", `{"trial":"` + testTrial + `","state":"sta`},
		{"not json", testTrial + ".json", "\x00\x01garbage"},
		{"named for another trial", "tr_other.json", `{"trial":"` + testTrial + `","state":"planned","steps":[]}`},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			p := filepath.Join(dir, c.file)
			if err := os.WriteFile(p, []byte(c.body), 0o600); err != nil {
				t.Fatal(err)
			}
			rec, err := Recover(dir)
			if err == nil {
				t.Fatalf("Recover of an unreadable journal returned no error (%v)", rec)
			}
			if !strings.Contains(err.Error(), "left in place") {
				t.Errorf("error %q does not say the journal was left in place", err)
			}
			if b, rerr := os.ReadFile(p); rerr != nil || string(b) != c.body {
				t.Errorf("the journal was not left as it was: %q, %v", b, rerr)
			}
		})
	}
	t.Run("one bad, one good", func(t *testing.T) {
		requireRoot(t)
		f := newFx(t, common)
		d := f.delta(f.create("x", "x\n", 0o644))
		crashAt(t, f, d, 1, false)
		bad := filepath.Join(f.jdir, "tr_bad.json")
		os.WriteFile(bad, []byte("{"), 0o600)
		rec, err := Recover(f.jdir)
		if err == nil {
			t.Error("no error for the bad journal")
		}
		if len(rec) != 1 || rec[0].Trial != testTrial || rec[0].Committed {
			t.Errorf("Recover: %+v, want %s rolled back", rec, testTrial)
		}
		wantTree(t, "host", common, f.hostSnap(), false)
		if _, err := os.Stat(bad); err != nil {
			t.Errorf("bad journal: %v", err)
		}
	})
}

// TestForceNever: conflicts whose trial state cannot be reached from the host's
// stay conflicts when forced, and say so.
func TestForceNever(t *testing.T) {
	requireRoot(t)
	base := common.with("a", reg("a\n", 0o644), "d", dir(0o755), "d/x", reg("x\n", 0o644))
	cases := []struct {
		name    string
		host    func(f *fx)
		changes func(f *fx) changeList
		want    string
	}{
		{
			name:    "file created where the host has a dir now",
			host:    func(f *fx) { os.Mkdir(f.p("n"), 0o755) },
			changes: func(f *fx) changeList { return changeList{f.create("n", "n\n", 0o644)} },
			want:    "n",
		},
		{
			name:    "dir created where the host has a file now",
			host:    func(f *fx) { os.WriteFile(f.p("n"), nil, 0o644) },
			changes: func(f *fx) changeList { return changeList{f.mkdir("n", 0o755)} },
			want:    "n",
		},
		{
			name:    "modify of a file that is a dir now",
			host:    func(f *fx) { os.Remove(f.p("a")); os.Mkdir(f.p("a"), 0o755) },
			changes: func(f *fx) changeList { return changeList{f.modify("a", "a\n", 0o644, "b\n", 0o644)} },
			want:    "a",
		},
		{
			name:    "delete of a file that is a dir now",
			host:    func(f *fx) { os.Remove(f.p("a")); os.Mkdir(f.p("a"), 0o755) },
			changes: func(f *fx) changeList { return changeList{f.del("a", "a\n", 0o644)} },
			want:    "a",
		},
		{
			name:    "chmod of a file the host deleted",
			host:    func(f *fx) { os.Remove(f.p("a")) },
			changes: func(f *fx) changeList { return changeList{f.chmodFile("a", "a\n", 0o644, 0o600)} },
			want:    "a",
		},
		{
			name:    "create in a dir the host deleted",
			host:    func(f *fx) { os.RemoveAll(f.p("d")) },
			changes: func(f *fx) changeList { return changeList{f.create("d/new", "n\n", 0o644)} },
			want:    "d/new",
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFx(t, base)
			d := f.delta(append(c.changes(f), f.create("fine", "fine\n", 0o644))...)
			c.host(f)
			before := f.hostSnap()
			opt := f.opt()
			opt.Force = true
			_, err := Apply(context.Background(), d, opt)
			if got := conflictPaths(t, err); !slices.Equal(got, []string{f.p(c.want)}) {
				t.Errorf("conflicts at %v, want %s", got, c.want)
			}
			if !strings.Contains(err.Error(), "force cannot override") {
				t.Errorf("the conflict does not say it cannot be forced: %v", err)
			}
			wantTree(t, "host", before, f.hostSnap(), true)
			noLeftovers(t, f.base, f.jdir)
		})
	}
}

// TestForcedRollbackKeepsHostModes: a forced chmod that is rolled back puts
// back the mode the host had, not the one the trial started from.
func TestForcedRollbackKeepsHostModes(t *testing.T) {
	requireRoot(t)
	f := newFx(t, common.with("chm", reg("chm\n", 0o640), "d", dir(0o700)))
	d := f.delta(f.chmodFile("chm", "chm\n", 0o644, 0o600), f.chmodDir("d", 0o755, 0o750),
		f.create("a", "a\n", 0o644), f.create("b", "b\n", 0o644))
	before := f.hostSnap()
	opt := f.opt()
	opt.Force = true
	opt.Hook = func(p int) {
		if p == 1 { // once planned: the chmods must be undone too
			f.failOpen = f.opened + 2
		}
	}
	if _, err := Apply(context.Background(), d, opt); err == nil {
		t.Fatal("Apply succeeded")
	}
	wantTree(t, "host", before, f.hostSnap(), true)
	// And after a crash, by Recover.
	for n := 1; ; n++ {
		f := newFx(t, common.with("chm", reg("chm\n", 0o640), "d", dir(0o700)))
		d := f.delta(f.chmodFile("chm", "chm\n", 0o644, 0o600), f.chmodDir("d", 0o755, 0o750),
			f.create("a", "a\n", 0o644))
		before := f.hostSnap()
		crashed, state := crashAt(t, f, d, n, true)
		if !crashed {
			break
		}
		checkRecovered(t, f, n, state, before,
			common.with("chm", reg("chm\n", 0o600), "d", dir(0o750), "a", reg("a\n", 0o644)))
	}
}

// TestSwapDuringApply: a parent dir turned into a symlink after the check,
// while the commit runs, stops it with ErrUnsafePath and rolls back.
func TestSwapDuringApply(t *testing.T) {
	for _, walk := range []bool{false, true} {
		t.Run(fmt.Sprintf("walkBeneath=%v", walk), func(t *testing.T) { testSwapDuringApply(t, walk) })
	}
}

func testSwapDuringApply(t *testing.T, walk bool) {
	requireRoot(t)
	base := common.with("w", dir(0o755), "w/f", reg("f\n", 0o644))
	f := newFx(t, base)
	d := f.delta(f.modify("keep.txt", "keep\n", 0o644, "k2\n", 0o644), f.create("w/new", "new\n", 0o644),
		f.modify("w/f", "f\n", 0o644, "f2\n", 0o644))
	var host, outside tree
	opt := f.opt()
	opt.walkDirs = walk
	opt.Hook = func(p int) {
		if p == 1 {
			os.Rename(f.p("w"), filepath.Join(f.outside, "w"))
			os.Symlink(filepath.Join(f.outside, "w"), f.p("w"))
			host, outside = f.hostSnap(), f.outsideSnap()
		}
	}
	_, err := Apply(context.Background(), d, opt)
	if !errors.Is(err, dryexec.ErrUnsafePath) {
		t.Fatalf("Apply: %v, want ErrUnsafePath", err)
	}
	wantTree(t, "host", host, f.hostSnap(), true)
	wantTree(t, "symlink target", outside, f.outsideSnap(), true)
	noLeftovers(t, f.base, f.jdir)
}

func TestChmodAtRefusesSymlinks(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "target")
	os.WriteFile(target, nil, 0o644)
	os.Symlink("target", filepath.Join(dir, "ln"))
	dc := newDirs()
	defer dc.close()
	dfd, err := dc.open(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := chmodAt(dfd, "ln", 0o777); err == nil {
		t.Error("chmodAt changed a symlink")
	}
	if fi, _ := os.Stat(target); fi.Mode().Perm() != 0o644 {
		t.Errorf("the symlink's target is %v now", fi.Mode())
	}
	if err := chmodAt(dfd, "target", 0o4750); err != nil {
		t.Fatal(err)
	}
	if fi, _ := os.Stat(target); fi.Mode() != 0o750|os.ModeSetuid {
		t.Errorf("target is %v, want -rwsr-x---", fi.Mode())
	}
}

// TestSyncFSOnPathFds: the dir fds commit holds are O_PATH, which syncfs
// refuses; syncFS must sync through them anyway.
func TestSyncFSOnPathFds(t *testing.T) {
	dc := newDirs()
	defer dc.close()
	dfd, err := dc.open(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Syncfs(dfd); !errors.Is(err, unix.EBADF) {
		t.Logf("syncfs on an O_PATH fd: %v (EBADF expected; the kernel changed?)", err)
	}
	if err := syncFS([]int{dfd}); err != nil {
		t.Fatalf("syncFS: %v", err)
	}
}

// TestAppliedBeforeTheJournalGoes: Options.Applied runs once, with every
// change on the host and the journal still there in state applied, so a
// caller that records the commit there (the store marks the trial
// committed) leaves, at any crash, the journal or its record. When it fails,
// nothing is rolled back: Apply says so and the journal stays, and Recover
// finishes the commit and reports it committed.
func TestAppliedBeforeTheJournalGoes(t *testing.T) {
	requireRoot(t)
	for _, fail := range []bool{false, true} {
		t.Run(fmt.Sprintf("fails=%v", fail), func(t *testing.T) {
			f := newFx(t, tree{"old": reg("old\n", 0o644)})
			d := f.delta(f.create("new", "new\n", 0o644), f.modify("old", "old\n", 0o644, "changed\n", 0o644))
			opt := f.opt()
			calls := 0
			opt.Applied = func() error {
				calls++
				if st := journalState(t, f.jdir); st != stateApplied {
					t.Errorf("Applied ran with the journal %q, want %q", st, stateApplied)
				}
				if b, err := os.ReadFile(f.p("new")); err != nil || string(b) != "new\n" {
					t.Errorf("Applied ran before the changes were on the host: new is %q, %v", b, err)
				}
				if fail {
					return errors.New("disk full")
				}
				return nil
			}
			got, err := Apply(context.Background(), d, opt)
			if calls != 1 {
				t.Fatalf("Applied ran %d times", calls)
			}
			if !fail {
				if err != nil || len(got) != 2 {
					t.Fatalf("Apply: %d changes, %v", len(got), err)
				}
				noLeftovers(t, f.base, f.jdir)
				return
			}
			if err == nil || !strings.Contains(err.Error(), "disk full") || len(got) != 2 {
				t.Fatalf("Apply with Applied failing: %d changes, %v; want both changes and the error", len(got), err)
			}
			if st := journalState(t, f.jdir); st != stateApplied {
				t.Fatalf("after a failed Applied the journal is %q, want it kept, %q", st, stateApplied)
			}
			rec, err := Recover(f.jdir)
			if err != nil || len(rec) != 1 || !rec[0].Committed {
				t.Fatalf("Recover: %+v, %v; want the commit reported", rec, err)
			}
			if b, err := os.ReadFile(f.p("old")); err != nil || string(b) != "changed\n" {
				t.Fatalf("after Recover old is %q, %v: the commit was not kept", b, err)
			}
			noLeftovers(t, f.base, f.jdir)
		})
	}
}
