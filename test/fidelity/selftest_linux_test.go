package fidelity

import (
	"encoding/binary"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
)

// TestCompareCatches checks the comparison itself: a committed tree that
// differs from the native one in any single way the harness claims to check
// must be reported, with the right class, and an exact copy must not be.
func TestCompareCatches(t *testing.T) {
	fixed := time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)
	cases := []struct {
		name   string
		mutate func(t *testing.T, dir string)
		want   string // the class of diff expected; "" for none
	}{
		{"exact copy", func(*testing.T, string) {}, ""},
		{"mode", func(t *testing.T, d string) { must(t, os.Chmod(filepath.Join(d, "f"), 0o600)) }, "mode"},
		{"sticky bit", func(t *testing.T, d string) { must(t, os.Chmod(filepath.Join(d, "sticky"), 0o777)) }, "mode"},
		{"content", func(t *testing.T, d string) { rewrite(t, filepath.Join(d, "f"), "other\n", fixed) }, "content"},
		{"kind", func(t *testing.T, d string) {
			must(t, os.Remove(filepath.Join(d, "f")))
			must(t, os.Mkdir(filepath.Join(d, "f"), 0o644))
		}, "kind"},
		{"fifo made a file", func(t *testing.T, d string) {
			must(t, os.Remove(filepath.Join(d, "fifo")))
			rewrite(t, filepath.Join(d, "fifo"), "", fixed)
		}, "kind"},
		{"symlink target", func(t *testing.T, d string) {
			must(t, os.Remove(filepath.Join(d, "link")))
			must(t, os.Symlink("elsewhere", filepath.Join(d, "link")))
		}, "symlink target"},
		{"hard link broken", func(t *testing.T, d string) {
			must(t, os.Remove(filepath.Join(d, "sub", "a-hard")))
			rewrite(t, filepath.Join(d, "sub", "a-hard"), "a\n", fixed)
		}, "hard links"},
		{"missing", func(t *testing.T, d string) { must(t, os.Remove(filepath.Join(d, "f"))) }, "missing after commit"},
		{"extra", func(t *testing.T, d string) { rewrite(t, filepath.Join(d, "new"), "n\n", fixed) }, "only after commit"},
		{"deterministic mtime", func(t *testing.T, d string) {
			must(t, os.Chtimes(filepath.Join(d, "f"), fixed, fixed.Add(time.Second)))
		}, "mtime"},
		{"symlink mtime", func(t *testing.T, d string) {
			ts := []unix.Timespec{unix.NsecToTimespec(0), unix.NsecToTimespec(fixed.Add(time.Hour).UnixNano())}
			must(t, unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(d, "link"), ts, unix.AT_SYMLINK_NOFOLLOW))
		}, "mtime"},
		{"stale pyc", func(t *testing.T, d string) {
			// The source keeps its bytes but gets another mtime: the pyc
			// (equal bytes) no longer matches it.
			must(t, os.Chtimes(filepath.Join(d, "m.py"), fixed, fixed.Add(time.Hour)))
		}, "stale pyc"},
		{"non-UTF-8 name lost", func(t *testing.T, d string) {
			must(t, os.Rename(filepath.Join(d, "caf\xe9"), filepath.Join(d, "caf\ufffd")))
		}, "missing after commit"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			native, committed := t.TempDir()+"/n", t.TempDir()+"/c"
			makeFixture(t, native, fixed)
			cp(t, native, committed)
			tc.mutate(t, committed)
			a, b := mustScan(t, native), mustScan(t, committed)
			c := &comparison{before: a, native: a}
			diffs := c.trees(b)
			if tc.want == "" {
				if len(diffs) > 0 {
					t.Fatalf("an exact copy differs: %v", diffs)
				}
				return
			}
			if !slices.ContainsFunc(diffs, func(d diff) bool { return d.class == tc.want }) {
				t.Fatalf("want a %q diff, got %v", tc.want, diffs)
			}
		})
	}
}

// TestCompareRunTimeMtime: a file the native run wrote at run time must,
// after commit, carry an mtime from within the trial's run, not the commit's
// own time nor the template's.
func TestCompareRunTimeMtime(t *testing.T) {
	dir := t.TempDir()
	rewrite(t, filepath.Join(dir, "f"), "x\n", time.Unix(0, 2000))
	e := mustScan(t, dir)
	native := tree{"f": e["f"]}
	for _, tc := range []struct {
		name      string
		committed int64
		want      bool
	}{
		{"within the trial", 5500, false},
		{"the commit's time", 7000, true},
		{"the template's", 1000, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &comparison{before: tree{"f": {kind: dryexec.KindFile, mtime: 1000, sha: e["f"].sha, mode: e["f"].mode}},
				native: native, nWin: window{1500, 2500}, tWin: window{5000, 6000}}
			b := *e["f"]
			b.mtime = tc.committed
			diffs := c.trees(tree{"f": &b})
			if got := len(diffs) > 0; got != tc.want {
				t.Fatalf("diffs %v, want some: %v", diffs, tc.want)
			}
		})
	}
}

// TestCompareDelta: the delta must hold exactly what the native run changed.
func TestCompareDelta(t *testing.T) {
	root := "/r"
	fileEntry := &entry{kind: dryexec.KindFile, mode: 0o644, sha: "aa", size: 2, mtime: 5}
	for _, tc := range []struct {
		name   string
		before tree
		files  []dryexec.FileChange
		want   string
	}{
		{"exact", nil, []dryexec.FileChange{{Path: "/r/f", Op: dryexec.OpCreate, Kind: dryexec.KindFile, Mode: "0644", SHA256: "aa", Size: 2, MtimeNS: 5}}, ""},
		{"missing", nil, nil, "delta missing"},
		{"extra", tree{"f": fileEntry}, []dryexec.FileChange{{Path: "/r/f", Op: dryexec.OpModify, Kind: dryexec.KindFile, Mode: "0644", SHA256: "aa", Size: 2, MtimeNS: 5}}, "delta extra"},
		{"mode", nil, []dryexec.FileChange{{Path: "/r/f", Op: dryexec.OpCreate, Kind: dryexec.KindFile, Mode: "0600", SHA256: "aa", Size: 2, MtimeNS: 5}}, "delta mode"},
		{"content", nil, []dryexec.FileChange{{Path: "/r/f", Op: dryexec.OpCreate, Kind: dryexec.KindFile, Mode: "0644", SHA256: "bb", Size: 2, MtimeNS: 5}}, "delta content"},
		{"fifo as other", nil, []dryexec.FileChange{{Path: "/r/f", Op: dryexec.OpCreate, Kind: dryexec.KindOther, Mode: "0644"}}, "delta state"},
		{"no mtime", nil, []dryexec.FileChange{{Path: "/r/f", Op: dryexec.OpCreate, Kind: dryexec.KindFile, Mode: "0644", SHA256: "aa", Size: 2}}, "delta mtime"},
		{"outside", nil, []dryexec.FileChange{{Path: "/r/f", Op: dryexec.OpCreate, Kind: dryexec.KindFile, Mode: "0644", SHA256: "aa", Size: 2, MtimeNS: 5},
			{Path: "/elsewhere", Op: dryexec.OpCreate, Kind: dryexec.KindFile}}, "delta outside the tree"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := tc.before
			if before == nil {
				before = tree{}
			}
			c := &comparison{before: before, native: tree{"f": fileEntry}, nWin: window{100, 200}, tWin: window{300, 400}}
			diffs := c.delta(&dryexec.StateDelta{Files: tc.files}, root)
			if tc.want == "" {
				if len(diffs) > 0 {
					t.Fatalf("an exact delta differs: %v", diffs)
				}
				return
			}
			if !slices.ContainsFunc(diffs, func(d diff) bool { return d.class == tc.want }) {
				t.Fatalf("want a %q diff, got %v", tc.want, diffs)
			}
		})
	}
}

// TestTables keeps the tables honest: every workload they name exists, every
// rule says why, and docs/fidelity.md lists every rule and the known table's
// causes.
func TestTables(t *testing.T) {
	names := map[string]bool{}
	for _, w := range workloads {
		if names[w.name] {
			t.Errorf("duplicate workload %s", w.name)
		}
		names[w.name] = true
	}
	if len(workloads) < 25 {
		t.Errorf("%d workloads; the harness must keep at least 25", len(workloads))
	}
	doc, err := os.ReadFile("../../docs/fidelity.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range ignored {
		if r.workload != "" && !names[r.workload] {
			t.Errorf("ignore rule for unknown workload %s", r.workload)
		}
		if r.why == "" {
			t.Errorf("ignore rule %+v says not why", r)
		}
		key := r.path + r.output + r.what
		if !strings.Contains(string(doc), key) {
			t.Errorf("docs/fidelity.md does not list the rule %q", key)
		}
	}
	seen := map[string]bool{}
	for _, k := range knownDiffering {
		if !names[k.workload] {
			t.Errorf("knownDiffering names unknown workload %s", k.workload)
		}
		if !slices.Contains([]string{"", "root", "rootless", "gvisor", "vm"}, k.mode) || k.cause == "" {
			t.Errorf("knownDiffering entry %+v", k)
		}
		if seen[k.workload+"/"+k.mode] {
			t.Errorf("knownDiffering lists %s (%s) twice", k.workload, k.mode)
		}
		seen[k.workload+"/"+k.mode] = true
	}
	for _, m := range []struct {
		glob, path string
		want       bool
	}{
		{"**/.git/index", "work/repo/.git/index", true},
		{"**/.git/index", "work/.git/index.lock", false},
		{"home/.npm/_logs/**", "home/.npm/_logs", true},
		{"home/.npm/_logs/**", "home/.npm/_logs/a/b.log", true},
		{"home/.npm/_logs/**", "home/.npm/_logsx", false},
		{"home/*/x", "home/a/b/x", false},
	} {
		if got := globRegexp(m.glob).MatchString(m.path); got != m.want {
			t.Errorf("glob %q on %q: %v, want %v", m.glob, m.path, got, m.want)
		}
	}
}

// makeFixture makes a tree with every kind and property the comparison
// checks, all mtimes fixed.
func makeFixture(t *testing.T, dir string, at time.Time) {
	must(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o755))
	must(t, os.MkdirAll(filepath.Join(dir, "__pycache__"), 0o755))
	must(t, os.Mkdir(filepath.Join(dir, "sticky"), 0o755))
	must(t, os.Chmod(filepath.Join(dir, "sticky"), 0o777|os.ModeSticky))
	rewrite(t, filepath.Join(dir, "f"), "f\n", at)
	rewrite(t, filepath.Join(dir, "a"), "a\n", at)
	must(t, os.Link(filepath.Join(dir, "a"), filepath.Join(dir, "sub", "a-hard")))
	must(t, os.Symlink("f", filepath.Join(dir, "link")))
	must(t, unix.Mkfifo(filepath.Join(dir, "fifo"), 0o644))
	rewrite(t, filepath.Join(dir, "caf\xe9"), "latin-1 name\n", at)
	src := "X = 1\n"
	rewrite(t, filepath.Join(dir, "m.py"), src, at)
	// A timestamp pyc (PEP 552, flags 0) valid for m.py.
	hdr := []byte{0xa7, 0x0d, 0x0d, 0x0a, 0, 0, 0, 0}
	hdr = binary.LittleEndian.AppendUint32(hdr, uint32(at.Unix()))
	hdr = binary.LittleEndian.AppendUint32(hdr, uint32(len(src)))
	rewrite(t, filepath.Join(dir, "__pycache__", "m.cpython-311.pyc"), string(hdr)+"code", at)
	ts := []unix.Timespec{unix.NsecToTimespec(at.UnixNano()), unix.NsecToTimespec(at.UnixNano())}
	must(t, unix.UtimesNanoAt(unix.AT_FDCWD, filepath.Join(dir, "link"), ts, unix.AT_SYMLINK_NOFOLLOW))
}

func rewrite(t *testing.T, p, content string, at time.Time) {
	t.Helper()
	must(t, os.WriteFile(p, []byte(content), 0o644))
	must(t, os.Chtimes(p, at, at))
}

func cp(t *testing.T, from, to string) {
	t.Helper()
	if out, err := exec.Command("cp", "-a", from, to).CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v\n%s", err, out)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
