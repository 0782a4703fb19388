package render

import (
	"bytes"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
)

// genSource is a FileSource that makes its changes as they are read, like a
// spilled delta: nothing of them is held, so that a test can see whether the
// summary holds them.
type genSource struct {
	n    int
	make func(i int, c *dryexec.FileChange)
	// live is the heap in use, after a collection, once every change was
	// read: what the reader kept.
	live uint64
}

func (g *genSource) Len() int { return g.n }

func (g *genSource) Each(fn func(*dryexec.FileChange) error) error {
	var c dryexec.FileChange
	for i := 0; i < g.n; i++ {
		c = dryexec.FileChange{}
		g.make(i, &c)
		if err := fn(&c); err != nil {
			return err
		}
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	g.live = max(g.live, ms.HeapAlloc)
	return nil
}

func summaryDelta(files []dryexec.FileChange) *dryexec.StateDelta {
	d := &dryexec.StateDelta{TrialID: "tr_aaaaaaaaaaaaaaaaaaaa", Rung: "ns", Action: dryexec.Action{Argv: []string{"x"}, Cwd: "/w"}, Files: files}
	d.Normalize()
	return d
}

func created(p string, size int64) dryexec.FileChange {
	return dryexec.FileChange{Path: p, Op: dryexec.OpCreate, Kind: dryexec.KindFile, Size: size, Mode: "0644", Diff: "+x\n"}
}

func mkdir(p string) dryexec.FileChange {
	return dryexec.FileChange{Path: p, Op: dryexec.OpMkdir, Kind: dryexec.KindDir, Mode: "0755"}
}

// venv is a tree like `python -m venv v` makes, plus one edited file.
func venv() []dryexec.FileChange {
	fs := []dryexec.FileChange{{Path: "/w/a.txt", Op: dryexec.OpModify, Kind: dryexec.KindFile, Size: 5, Mode: "0644", Diff: "-a\n+b\n"},
		mkdir("/w/v"), mkdir("/w/v/bin")}
	for i := range 20 {
		fs = append(fs, created(fmt.Sprintf("/w/v/bin/tool%02d", i), 100))
	}
	fs = append(fs, mkdir("/w/v/lib"), mkdir("/w/v/lib/python3.11"), mkdir("/w/v/lib/python3.11/site-packages"))
	for i := range 3412 {
		fs = append(fs, created(fmt.Sprintf("/w/v/lib/python3.11/site-packages/p%d/m.py", i), 7000))
	}
	return append(fs, created("/w/v/pyvenv.cfg", 10), created("/tmp/pip-log", 3))
}

// TestSummaryScales: past MaxFileLines changes the summary groups them by
// directory in about one screen, collapsed subtrees counted, the headline
// counting every kind, and says how to see every change; within it, every
// change is listed with its diff, as before.
func TestSummaryScales(t *testing.T) {
	var rmTree []dryexec.FileChange
	for i := range 2000 {
		rmTree = append(rmTree, dryexec.FileChange{Path: fmt.Sprintf("/w/tree/d%d/f%d", i%7, i), Op: dryexec.OpDelete, Kind: dryexec.KindFile, Size: 1, Mode: "0644"})
	}
	var flat []dryexec.FileChange
	for i := range 500 {
		flat = append(flat, created(fmt.Sprintf("/w/f%03d", i), 1))
	}
	// mkdir -p v/a v/b, files in v/a only: v's own creation is neither
	// v/a's nor v/b's.
	twoKids := []dryexec.FileChange{mkdir("/w/v"), mkdir("/w/v/a"), mkdir("/w/v/b")}
	for i := range 300 {
		twoKids = append(twoKids, created(fmt.Sprintf("/w/v/a/f%d", i), 1))
	}
	// mkdir -p one/two, files in one/two only: one line for the tree.
	oneKid := []dryexec.FileChange{mkdir("/w/one"), mkdir("/w/one/two")}
	for i := range 300 {
		oneKid = append(oneKid, created(fmt.Sprintf("/w/one/two/f%d", i), 1))
	}
	tests := []struct {
		name     string
		files    []dryexec.FileChange
		maxLines int
		want     []string // lines that must be there
		not      []string // substrings that must not
		atMost   int      // lines of output
	}{
		{"venv", venv(), 0, []string{
			"3,440 files changed (3,439 created, 1 modified, 0 deleted, 22.8 MiB written)",
			"  in /w:",
			"  ~ a.txt",
			"  + v/",
			"  + v/bin/ — 21 files created, 2.0 KiB",
			"  + v/lib/ — 3,415 files created, 22.8 MiB",
			"  + v/pyvenv.cfg",
			"  + /tmp/pip-log",
			"  … every change, with diffs: dryexec show tr_aaaaaaaaaaaaaaaaaaaa --files",
		}, []string{"tool01", "site-packages/p1", "+x"}, 14},
		{"rm -rf tree", rmTree, 0, []string{
			"2,000 files changed (0 created, 0 modified, 2,000 deleted, 0 bytes written)",
			"  - tree/d0/ — 286 files deleted",
			"  - tree/d6/ — 285 files deleted",
		}, []string{"/f1\n"}, 14},
		{"flat: too many to group, cut", flat, 0, []string{
			"500 files changed (500 created, 0 modified, 0 deleted, 500 bytes written)",
			"  + f000",
			"  + f028",
			"  … 471 more changes — dryexec show tr_aaaaaaaaaaaaaaaaaaaa --files",
		}, []string{"f029"}, 36},
		{"a directory with two subtrees", twoKids, 0, []string{
			"  + v/",
			"  + v/a/ — 301 files created, 300 B",
			"  + v/b/",
		}, []string{"302"}, 14},
		{"a directory with one subtree", oneKid, 0, []string{
			"  + one/two/ — 302 files created, 300 B",
		}, []string{"  + one/\n"}, 14},
		{"--files: every change", venv()[:40], -1, []string{"  + /w/v/bin/tool01", "    +x", "  ~ /w/a.txt"}, []string{"--files"}, 200},
		{"small: every change, as before", venv()[:5], 0, []string{"  + /w/v/bin/tool01", "    +x"}, []string{"--files"}, 30},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := Summary(&b, summaryDelta(tt.files), Options{MaxFileLines: tt.maxLines}); err != nil {
				t.Fatal(err)
			}
			out := b.String()
			lines := strings.Split(out, "\n")
			for _, w := range tt.want {
				found := false
				for _, l := range lines {
					found = found || l == w
				}
				if !found {
					t.Errorf("no line %q in\n%s", w, out)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(out, n) {
					t.Errorf("%q in\n%s", n, out)
				}
			}
			if len(lines) > tt.atMost {
				t.Errorf("%d lines, want at most %d:\n%s", len(lines), tt.atMost, out)
			}
		})
	}
}

// TestSummaryMillionSpilledBounded: the summary of a spilled delta of a
// million changes reads them one at a time and keeps a bounded summary of
// them, not the changes: the heap in use stays small and the output short.
func TestSummaryMillionSpilledBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("a million changes")
	}
	src := &genSource{n: 1_000_000, make: func(i int, c *dryexec.FileChange) {
		*c = dryexec.FileChange{Path: fmt.Sprintf("/w/out/d%03d/e%03d/f%d.o", i%997, i%89, i), Op: dryexec.OpCreate, Kind: dryexec.KindFile, Size: 10, Mode: "0644"}
	}}
	d := summaryDelta(nil)
	d.SetFileSource(src)
	runtime.GC()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	var b bytes.Buffer
	if err := Summary(&b, d, Options{}); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	if !strings.Contains(out, "1,000,000 files changed (1,000,000 created, 0 modified, 0 deleted, 9.5 MiB written)") ||
		!strings.Contains(out, "  + out/ — 1,000,000 files created, 9.5 MiB") {
		t.Errorf("summary:\n%s", out)
	}
	if n := strings.Count(out, "\n"); n > 40 {
		t.Errorf("%d lines", n)
	}
	// A million FileChanges held would be hundreds of MB; the summary's
	// levels are a few dozen groups.
	if grew := int64(src.live) - int64(before.HeapAlloc); grew > 8<<20 {
		t.Errorf("the heap grew by %d MiB while summarising", grew>>20)
	}
}
