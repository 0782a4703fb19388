package fsdelta

import (
	"errors"
	"io"
	"os"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/wire"
)

// add is one Differ.Add call: an entry and, for files, its content.
type add struct {
	e    wire.FSEntry
	data *string   // content, when r is nil
	r    io.Reader // content
}

func (a add) reader() io.Reader {
	switch {
	case a.r != nil:
		return a.r
	case a.data != nil:
		return strings.NewReader(*a.data)
	}
	return nil
}

// The entries below are owned by the test's user, as if it had made them.
func fEntry(p, content string) add {
	return mine(add{e: wire.FSEntry{Path: p, Kind: wire.EntryFile, Mode: 0o644, Size: int64(len(content))}, data: str(content)})
}
func dEntry(p string) add {
	return mine(add{e: wire.FSEntry{Path: p, Kind: wire.EntryDir, Mode: 0o755}})
}
func oEntry(p string) add {
	return mine(add{e: wire.FSEntry{Path: p, Kind: wire.EntryDir, Mode: 0o755, Opaque: true}})
}
func wEntry(p string) add { return mine(add{e: wire.FSEntry{Path: p, Kind: wire.EntryWhiteout}}) }
func lEntry(p, target string) add {
	return mine(add{e: wire.FSEntry{Path: p, Kind: wire.EntrySymlink, Mode: 0o777, Link: target}})
}

func rEntry(p, src string) add {
	return mine(add{e: wire.FSEntry{Path: p, Kind: wire.EntryDir, Mode: 0o755, Redirect: src}})
}

func mine(a add) add {
	a.e.UID, a.e.GID = os.Geteuid(), os.Getegid()
	return a
}

// hostileDirs makes a lower (with a symlink esc to a sibling dir outside) and the
// outside dir, and returns them with their common parent.
func hostileDirs(t *testing.T) (base, lower, outside string) {
	base = t.TempDir()
	lower, outside = base+"/lower", base+"/outside"
	must(t, os.Mkdir(lower, 0o755))
	must(t, os.Mkdir(outside, 0o755))
	buildTree(t, outside, []node{
		file("secret", "S\n", 0o600),
		file("other", "O\n", 0o644),
		dir("sub", 0o755),
		file("sub/deep", "D\n", 0o644),
	})
	buildTree(t, lower, with(
		link("esc", outside),
		link("d/esc", outside),
		link("rel", "../outside"),
	))
	return base, lower, outside
}

func TestDifferRejectsHostileEntries(t *testing.T) {
	longer := "longer than three bytes"
	cases := []struct {
		name     string
		prior    []add // accepted first
		bad      add
		badEntry bool // must be an *ErrBadEntry (else: any error)
	}{
		{name: "dot-dot file", bad: fEntry("../outside/secret", "S\n"), badEntry: true},
		{name: "dot-dot whiteout", bad: wEntry("../outside/secret"), badEntry: true},
		{name: "dot-dot alone", bad: oEntry(".."), badEntry: true},
		{name: "dot-dot inside", bad: wEntry("d/../../outside"), badEntry: true},
		{name: "a/../b", bad: wEntry("d/../a.txt"), badEntry: true},
		{name: "absolute", bad: wEntry("/etc/passwd"), badEntry: true},
		{name: "absolute outside", bad: wEntry("/tmp"), badEntry: true},
		{name: "empty path", bad: fEntry("", "x"), badEntry: true},
		{name: "dot", bad: oEntry("."), badEntry: true},
		{name: "dot slash", bad: wEntry("./a.txt"), badEntry: true},
		{name: "trailing slash", bad: wEntry("d/"), badEntry: true},
		{name: "double slash", bad: wEntry("d//b.txt"), badEntry: true},
		{name: "NUL", bad: wEntry("a.txt\x00/../../outside"), badEntry: true},
		{name: "unknown mount", bad: add{e: wire.FSEntry{Mount: 1, Path: "a.txt", Kind: wire.EntryWhiteout}}, badEntry: true},
		{name: "negative mount", bad: add{e: wire.FSEntry{Mount: -1, Path: "a.txt", Kind: wire.EntryWhiteout}}, badEntry: true},
		{name: "unknown kind", bad: add{e: wire.FSEntry{Path: "a.txt", Kind: "x"}}, badEntry: true},
		{name: "empty kind", bad: add{e: wire.FSEntry{Path: "a.txt"}}, badEntry: true},
		{name: "mode with file type bits", bad: add{e: wire.FSEntry{Path: "n", Kind: wire.EntryFile, Mode: 0o100644}, data: str("")}, badEntry: true},
		{name: "mode with dir type bits", bad: add{e: wire.FSEntry{Path: "n", Kind: wire.EntryDir, Mode: 0o40755}}, badEntry: true},
		{name: "negative size", bad: add{e: wire.FSEntry{Path: "n", Kind: wire.EntryFile, Mode: 0o644, Size: -1}, data: str("")}, badEntry: true},
		{name: "child before parent", bad: fEntry("newdir/f", "f"), badEntry: true},
		{name: "child of a host dir not reported", bad: wEntry("d/b.txt"), badEntry: true},
		{name: "child of a file", prior: []add{fEntry("a.txt", "one\ntwo\n")}, bad: fEntry("a.txt/x", "x"), badEntry: true},
		{name: "child of a whiteout", prior: []add{wEntry("d")}, bad: wEntry("d/b.txt"), badEntry: true},
		{name: "child of a symlink", prior: []add{lEntry("ln", "/")}, bad: fEntry("ln/etc", "x"), badEntry: true},
		{name: "child of a host symlink", bad: fEntry("esc/secret", "S\n"), badEntry: true},
		{name: "same path twice", prior: []add{dEntry("nd")}, bad: dEntry("nd"), badEntry: true},
		{name: "same path twice, other kind", prior: []add{fEntry("a.txt", "x")}, bad: wEntry("a.txt"), badEntry: true},
		// The Differ keeps files' paths only beneath opaque and renamed dirs:
		// walk order is what catches a path reported again later.
		{name: "same path twice, another between", prior: []add{fEntry("a.txt", "x"), fEntry("b.txt", "y")}, bad: fEntry("a.txt", "z"), badEntry: true},
		{name: "same file twice in a new dir, another between",
			prior: []add{dEntry("nd"), fEntry("nd/a", "x"), fEntry("nd/b", "y")}, bad: fEntry("nd/a", "z"), badEntry: true},
		{name: "names out of order", prior: []add{fEntry("b.txt", "y")}, bad: fEntry("a.txt", "x"), badEntry: true},
		{name: "a dir after what it holds", prior: []add{dEntry("nd"), dEntry("nd/sub"), fEntry("nd/sub/f", "x")}, bad: dEntry("nd/sub"), badEntry: true},
		{name: "content shorter than size",
			bad:      add{e: wire.FSEntry{Path: "n", Kind: wire.EntryFile, Mode: 0o644, Size: 10}, data: str("short")},
			badEntry: true},
		{name: "content longer than size",
			bad:      add{e: wire.FSEntry{Path: "n", Kind: wire.EntryFile, Mode: 0o644, Size: 3}, data: &longer},
			badEntry: true},
		{name: "content longer than size, over a host file",
			bad:      add{e: wire.FSEntry{Path: "a.txt", Kind: wire.EntryFile, Mode: 0o644, Size: 4}, data: str("one\ntwo\n")},
			badEntry: true},
		{name: "no content", bad: add{e: wire.FSEntry{Path: "n", Kind: wire.EntryFile, Mode: 0o644, Size: 5}}, badEntry: true},
		{name: "content reader fails",
			bad: add{e: wire.FSEntry{Path: "n", Kind: wire.EntryFile, Mode: 0o644, Size: 5}, r: iotest.ErrReader(errors.New("boom"))}},
		{name: "content reader fails after some bytes",
			bad: add{e: wire.FSEntry{Path: "n", Kind: wire.EntryFile, Mode: 0o644, Size: 5},
				r: io.MultiReader(strings.NewReader("ab"), iotest.ErrReader(errors.New("boom")))}},
		{name: "symlink with empty target", bad: lEntry("ln", ""), badEntry: true},
		{name: "negative uid", bad: add{e: wire.FSEntry{Path: "n", Kind: wire.EntryDir, Mode: 0o755, UID: -1}}, badEntry: true},
		{name: "negative gid", bad: add{e: wire.FSEntry{Path: "n", Kind: wire.EntryDir, Mode: 0o755, GID: -1}}, badEntry: true},
		{name: "negative uid of a file",
			bad:      add{e: wire.FSEntry{Path: "a.txt", Kind: wire.EntryFile, Mode: 0o644, Size: 1, UID: -5}, data: str("x")},
			badEntry: true},
		{name: "negative gid of a whiteout", bad: add{e: wire.FSEntry{Path: "a.txt", Kind: wire.EntryWhiteout, GID: -2}}, badEntry: true},
		{name: "symlink with NUL in target", bad: lEntry("ln", "/etc\x00passwd"), badEntry: true},
		{name: "redirect out of the mount", bad: rEntry("nd", "../outside"), badEntry: true},
		{name: "redirect absolute", bad: rEntry("nd", "/etc"), badEntry: true},
		{name: "redirect not clean", bad: rEntry("nd", "d/../../outside"), badEntry: true},
		{name: "redirect on a file",
			bad:      add{e: wire.FSEntry{Path: "n", Kind: wire.EntryFile, Mode: 0o644, Redirect: "d"}, data: str("")},
			badEntry: true},
		{name: "redirect on an opaque dir",
			bad:      add{e: wire.FSEntry{Path: "n", Kind: wire.EntryDir, Mode: 0o755, Opaque: true, Redirect: "d"}},
			badEntry: true},
		{name: "hard link without an inode",
			bad:      add{e: wire.FSEntry{Path: "n", Kind: wire.EntryFile, Mode: 0o644, Nlink: 2}, data: str("")},
			badEntry: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			base, lower, _ := hostileDirs(t)
			before := snapshot(t, base)
			d := NewDiffer([]Mount{{Path: lower}}, nil, diffMax)
			defer d.Close()
			for _, a := range c.prior {
				if err := d.Add(&a.e, a.reader()); err != nil {
					t.Fatalf("prior entry %q refused: %v", a.e.Path, err)
				}
			}
			err := d.Add(&c.bad.e, c.bad.reader())
			if err == nil {
				t.Fatalf("entry %+v accepted", c.bad.e)
			}
			var be *ErrBadEntry
			if c.badEntry && !errors.As(err, &be) {
				t.Fatalf("error %v (%T) is not an *ErrBadEntry", err, err)
			}
			if be != nil && be.Entry.Path != c.bad.e.Path {
				t.Errorf("ErrBadEntry names %q, not %q", be.Entry.Path, c.bad.e.Path)
			}
			checkSameSnapshot(t, "lower and outside", before, snapshot(t, base))
		})
	}
}

func TestCheckRelPath(t *testing.T) {
	good := []string{"a", "a/b", "a.b/c..d", "...", "..a", "a/..b", "a b/ c", "\xff"}
	bad := []string{"", ".", "..", "../a", "a/..", "a/../b", "/a", "/", "a/", "a//b", "./a", "a/./b", "a\x00b"}
	for _, p := range good {
		if err := wire.CheckRelPath(p); err != nil {
			t.Errorf("wire.CheckRelPath(%q) = %v, want ok", p, err)
		}
	}
	for _, p := range bad {
		if err := wire.CheckRelPath(p); err == nil {
			t.Errorf("wire.CheckRelPath(%q) ok, want an error", p)
		}
	}
}

// Crafted but well-formed entries naming a host symlink (to outside the lower)
// replace the symlink; nothing is ever read or listed through it.
func TestDifferNeverFollowsHostSymlinks(t *testing.T) {
	cases := []struct {
		name string
		adds []add
		want []wc
	}{
		{
			name: "dir over a host symlink, with a file the outside also has",
			adds: []add{dEntry("esc"), fEntry("esc/other", "O\n"), fEntry("esc/secret", "S\n")},
			want: []wc{
				wDeleteLink("esc", "$OUT"),
				wMkdir("esc", "0755"),
				wCreate("esc/other", "O\n", "0644", "+O"),
				wCreate("esc/secret", "S\n", "0644", "+S"),
			},
		},
		{
			name: "opaque dir over a host symlink",
			adds: []add{oEntry("esc")},
			want: []wc{wDeleteLink("esc", "$OUT"), wMkdir("esc", "0755")},
		},
		{
			name: "opaque dir over a relative host symlink",
			adds: []add{oEntry("rel"), wEntry("rel/sub")},
			want: []wc{wDeleteLink("rel", "../outside"), wMkdir("rel", "0755")},
		},
		{
			name: "whiteout of a host symlink",
			adds: []add{wEntry("esc")},
			want: []wc{wDeleteLink("esc", "$OUT")},
		},
		{
			name: "file over a host symlink",
			adds: []add{fEntry("esc", "S\n")},
			want: []wc{wDeleteLink("esc", "$OUT"), wCreate("esc", "S\n", "0644", "+S")},
		},
		{
			name: "symlink over a host symlink with the same target",
			adds: []add{lEntry("esc", "$OUT")},
		},
		{
			name: "opaque host dir holding a symlink to outside",
			adds: []add{oEntry("d")},
			want: []wc{wDelete("d/b.txt", "bee\n", "0644"), wDeleteLink("d/esc", "$OUT")},
		},
		{
			name: "opaque host dir, with a dir over its symlink",
			adds: []add{oEntry("d"), dEntry("d/esc"), fEntry("d/esc/secret", "S\n")},
			want: []wc{
				wDelete("d/b.txt", "bee\n", "0644"),
				wDeleteLink("d/esc", "$OUT"),
				wMkdir("d/esc", "0755"),
				wCreate("d/esc/secret", "S\n", "0644", "+S"),
			},
		},
		{
			name: "nested opaque dirs are listed once",
			adds: []add{oEntry("d"), oEntry("d/esc"), oEntry("d/esc/sub")},
			want: []wc{
				wDelete("d/b.txt", "bee\n", "0644"),
				wDeleteLink("d/esc", "$OUT"),
				wMkdir("d/esc", "0755"),
				wMkdir("d/esc/sub", "0755"),
			},
		},
	}
	for _, c := range cases {
		for _, h := range hostFSes {
			t.Run(c.name+"/"+h.name, func(t *testing.T) {
				base, lower, outside := hostileDirs(t)
				before := snapshot(t, base)
				d := NewDiffer([]Mount{{Path: lower}}, nil, diffMax)
				d.host = h.fs
				defer d.Close()
				for _, a := range c.adds {
					a.e.Link = strings.ReplaceAll(a.e.Link, "$OUT", outside)
					if err := d.Add(&a.e, a.reader()); err != nil {
						t.Fatalf("entry %q: %v", a.e.Path, err)
					}
				}
				got, err := d.Finish()
				if err != nil {
					t.Fatal(err)
				}
				want := append([]wc{}, c.want...)
				for i := range want {
					want[i].link = strings.ReplaceAll(want[i].link, "$OUT", outside)
				}
				checkChanges(t, lower, got, want)
				for _, g := range got {
					if g.BeforeSHA256 == sha("S\n") || g.BeforeSHA256 == sha("O\n") || g.BeforeSHA256 == sha("D\n") {
						t.Errorf("an outside file was read: %+v", g)
					}
					if strings.HasSuffix(g.Path, "/deep") {
						t.Errorf("an outside dir was listed: %+v", g)
					}
				}
				checkSameSnapshot(t, "lower and outside", before, snapshot(t, base))
			})
		}
	}
}

// Two nested opaque host dirs must not list the inner one's host files twice.
func TestDifferNestedOpaqueHostDirs(t *testing.T) {
	base := t.TempDir()
	lower := base + "/lower"
	must(t, os.Mkdir(lower, 0o755))
	buildTree(t, lower, []node{
		dir("a", 0o755), file("a/x", "x\n", 0o644),
		dir("a/b", 0o755), file("a/b/y", "y\n", 0o644),
		dir("a/b/c", 0o755), file("a/b/c/z", "z\n", 0o644),
	})
	d := NewDiffer([]Mount{{Path: lower}}, nil, diffMax)
	defer d.Close()
	for _, a := range []add{oEntry("a"), oEntry("a/b"), dEntry("a/b/c"), oEntry("a/b/c/new")} {
		must(t, d.Add(&a.e, a.reader()))
	}
	got, err := d.Finish()
	must(t, err)
	checkChanges(t, lower, got, []wc{
		wMkdir("a/b/c/new", "0755"),
		wDelete("a/b/c/z", "z\n", "0644"),
		wDelete("a/b/y", "y\n", "0644"),
		wDelete("a/x", "x\n", "0644"),
	})
}

// Two mounts: each entry is compared with its own mount's host dir.
func TestDifferTwoMounts(t *testing.T) {
	base := t.TempDir()
	l0, l1 := base+"/l0", base+"/l1"
	must(t, os.Mkdir(l0, 0o755))
	must(t, os.Mkdir(l1, 0o755))
	buildTree(t, l0, []node{file("f", "zero\n", 0o644)})
	buildTree(t, l1, []node{file("f", "one\n", 0o644)})
	d := NewDiffer([]Mount{{Path: l0}, {Path: l1}}, nil, diffMax)
	defer d.Close()
	e0 := wire.FSEntry{Mount: 0, Path: "f", Kind: wire.EntryWhiteout}
	e1 := wire.FSEntry{Mount: 1, Path: "f", Kind: wire.EntryFile, Mode: 0o644, Size: 4}
	must(t, d.Add(&e0, nil))
	must(t, d.Add(&e1, strings.NewReader("ONE\n")))
	got, err := d.Finish()
	must(t, err)
	if len(got) != 2 || got[0].Path != l0+"/f" || got[0].Op != dryexec.OpDelete || got[0].BeforeSHA256 != sha("zero\n") ||
		got[1].Path != l1+"/f" || got[1].Op != dryexec.OpModify || got[1].BeforeSHA256 != sha("one\n") {
		t.Fatalf("got %+v", got)
	}
}

// A renamed dir's source is read on the host like any other path: beneath the
// mount, never through a symlink. A redirect to a host symlink (which the
// overlay would never set) shows nothing of where it points.
func TestDifferRedirectNeverFollowsHostSymlinks(t *testing.T) {
	for _, src := range []string{"esc", "rel", "d/esc", "esc/sub"} {
		for _, h := range hostFSes {
			t.Run(src+"/"+h.name, func(t *testing.T) {
				base, lower, outside := hostileDirs(t)
				before := snapshot(t, base)
				d := NewDiffer([]Mount{{Path: lower}}, nil, diffMax)
				d.host = h.fs
				defer d.Close()
				a := rEntry("moved", src)
				must(t, d.Add(&a.e, nil))
				got, err := d.Finish()
				must(t, err)
				checkChanges(t, lower, got, []wc{wMkdir("moved", "0755")})
				noOutside(t, lower, outside, got)
				checkSameSnapshot(t, "lower and outside", before, snapshot(t, base))
			})
		}
	}
}

// Paths of one upper inode are one file: a guest that reports hard links with
// different contents is refused, not believed.
func TestDifferRefusesHardLinksThatDiffer(t *testing.T) {
	_, lower, _ := hostileDirs(t)
	d := NewDiffer([]Mount{{Path: lower}}, nil, diffMax)
	defer d.Close()
	for _, a := range []add{fEntry("x", "x\n"), fEntry("y", "not x\n")} {
		a.e.Ino, a.e.Nlink = 42, 2
		must(t, d.Add(&a.e, a.reader()))
	}
	_, err := d.Finish()
	var be *ErrBadEntry
	if !errors.As(err, &be) {
		t.Fatalf("Finish: %v, want an *ErrBadEntry", err)
	}
}
