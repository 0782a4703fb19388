package fsdelta

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/fswalk"
)

// fsops runs ordinary file operations in an overlay's merged dir.
type fsops struct {
	t *testing.T
	m string
}

func (f fsops) p(rel string) string { return filepath.Join(f.m, rel) }
func (f fsops) write(rel, content string) {
	f.t.Helper()
	must(f.t, os.WriteFile(f.p(rel), []byte(content), 0o644))
}
func (f fsops) remove(rel string) { f.t.Helper(); must(f.t, os.Remove(f.p(rel))) }
func (f fsops) removeAll(rel string) {
	f.t.Helper()
	if _, err := os.Lstat(f.p(rel)); err != nil {
		f.t.Fatalf("removeAll of a missing path: %v", err)
	}
	must(f.t, os.RemoveAll(f.p(rel)))
}

// rename is rename(2) itself: os.Rename refuses to replace a dir.
func (f fsops) rename(a, b string)         { f.t.Helper(); must(f.t, unix.Rename(f.p(a), f.p(b))) }
func (f fsops) chmod(rel string, m uint32) { f.t.Helper(); must(f.t, unix.Chmod(f.p(rel), m)) }
func (f fsops) symlink(target, rel string) { f.t.Helper(); must(f.t, os.Symlink(target, f.p(rel))) }
func (f fsops) mkdir(rel string)           { f.t.Helper(); must(f.t, os.Mkdir(f.p(rel), 0o755)) }
func (f fsops) mkdirAll(rel string)        { f.t.Helper(); must(f.t, os.MkdirAll(f.p(rel), 0o755)) }
func (f fsops) link(a, b string)           { f.t.Helper(); must(f.t, os.Link(f.p(a), f.p(b))) }
func (f fsops) chown(rel string, uid, gid int) {
	f.t.Helper()
	must(f.t, os.Lchown(f.p(rel), uid, gid))
}

// touchLater sets rel's mtime an hour after now.
func (f fsops) touchLater(rel string) {
	f.t.Helper()
	ts := time.Now().Add(time.Hour)
	must(f.t, os.Chtimes(f.p(rel), ts, ts))
}
func (f fsops) touch(rel string) {
	f.t.Helper()
	ts := time.Date(2001, 2, 3, 4, 5, 6, 0, time.UTC)
	must(f.t, os.Chtimes(f.p(rel), ts, ts))
}

type ovCase struct {
	name    string
	lower   []node
	outside []node // built in a dir outside the lower; "$OUT" in link targets is its path
	do      func(f fsops)
	want    []wc // "$OUT" in link is the outside dir's path
	// groups are the paths that must share a link group, each list its own;
	// every other change must have none.
	groups [][]string
	extra  func(t *testing.T, lower, outside string, got []dryexec.FileChange)
	// redirect: only where dirs can be renamed (redirect_dir=on).
	redirect bool
	// touched, when not nil, are exactly the paths the delta must list as
	// touched (mtime only), in order. Whatever it says, the touched list
	// must be what the merged view and the lower say (checkTouched).
	touched []string
	// oldTimes: every host path gets an mtime long past before the
	// overlay is mounted, so that a write in the same clock tick as the
	// tree was built still shows as another mtime.
	oldTimes bool
}

// The lower most cases start from.
var baseLower = []node{
	file("a.txt", "one\ntwo\n", 0o644),
	dir("d", 0o755),
	file("d/b.txt", "bee\n", 0o644),
}

func with(extra ...node) []node {
	return append(append([]node{}, baseLower...), extra...)
}

func bigText(lines int, tag string) string {
	var b strings.Builder
	for i := range lines {
		fmt.Fprintf(&b, "%s line %06d of a large text file\n", tag, i)
	}
	return b.String()
}

const diffMax = 64 << 10

func overlayCases() []ovCase {
	big := bigText(3000, "old") // ~100 KiB, above diffMax
	bigNew := big + "one more line\n"
	big2 := bigText(2500, "new")
	return []ovCase{
		{
			name:  "create file",
			lower: baseLower,
			do:    func(f fsops) { f.write("new.txt", "hello\n") },
			want:  []wc{wCreate("new.txt", "hello\n", "0644", "--- /dev/null", "+hello")},
		},
		{
			name:  "create file in a host dir",
			lower: baseLower,
			do:    func(f fsops) { f.write("d/new.txt", "hi\n") },
			want:  []wc{wCreate("d/new.txt", "hi\n", "0644", "+hi")},
		},
		{
			name:  "modify file",
			lower: baseLower,
			do:    func(f fsops) { f.write("a.txt", "one\nthree\n") },
			want: []wc{wModify("a.txt", "one\ntwo\n", "one\nthree\n", "0644", "0644",
				"--- a", "+++ b", " one", "-two", "+three")},
		},
		{
			name:  "modify empty file",
			lower: with(file("empty", "", 0o644)),
			do:    func(f fsops) { f.write("empty", "now\n") },
			want:  []wc{wModify("empty", "", "now\n", "0644", "0644", "+now")},
		},
		{
			name:  "truncate file",
			lower: baseLower,
			do:    func(f fsops) { f.write("a.txt", "") },
			want:  []wc{wModify("a.txt", "one\ntwo\n", "", "0644", "0644", "-one", "-two")},
		},
		{
			name:  "identical rewrite is only touched",
			lower: baseLower,
			do: func(f fsops) {
				f.write("a.txt", "one\ntwo\n")
				f.write("d/b.txt", "bee\n")
			},
			touched: []string{"a.txt", "d/b.txt"},
		},
		{
			name:  "touch only is only touched",
			lower: baseLower,
			do: func(f fsops) {
				f.touch("a.txt")
				f.touch("d/b.txt")
				f.touchLater("d")
			},
			touched: []string{"a.txt", "d", "d/b.txt"},
		},
		{
			name:  "chmod only",
			lower: baseLower,
			do:    func(f fsops) { f.chmod("a.txt", 0o600) },
			want:  []wc{wChmod("a.txt", "one\ntwo\n", "0644", "0600")},
		},
		{
			name:  "chmod back to the same mode is no change",
			lower: baseLower,
			do: func(f fsops) {
				f.chmod("a.txt", 0o600)
				f.chmod("a.txt", 0o644)
			},
		},
		{
			name:  "chmod dir",
			lower: baseLower,
			do:    func(f fsops) { f.chmod("d", 0o700) },
			want:  []wc{wChmodDir("d", "0755", "0700")},
		},
		{
			name:  "modify and chmod",
			lower: baseLower,
			do: func(f fsops) {
				f.write("a.txt", "one\ntwo\nthree\n")
				f.chmod("a.txt", 0o755)
			},
			want: []wc{wModify("a.txt", "one\ntwo\n", "one\ntwo\nthree\n", "0644", "0755", "+three")},
		},
		{
			name:  "delete file",
			lower: baseLower,
			do:    func(f fsops) { f.remove("d/b.txt") },
			want:  []wc{wDelete("d/b.txt", "bee\n", "0644")},
		},
		{
			name: "rm -r of a dir tree",
			lower: with(
				dir("t", 0o755),
				file("t/a", "A\n", 0o644),
				file("t/b", "B\n", 0o600),
				dir("t/empty", 0o700),
				link("t/link", "a"),
				dir("t/sub", 0o750),
				file("t/sub/c", "C\n", 0o644),
				dir("t/sub/deep", 0o711),
				file("t/sub/deep/e", "E\n", 0o640),
			),
			do: func(f fsops) { f.removeAll("t") },
			want: []wc{
				wDelete("t/a", "A\n", "0644"),
				wDelete("t/b", "B\n", "0600"),
				wRmdir("t/empty", "0700"),
				wDeleteLink("t/link", "a"),
				wDelete("t/sub/c", "C\n", "0644"),
				wDelete("t/sub/deep/e", "E\n", "0640"),
				wRmdir("t/sub/deep", "0711"),
				wRmdir("t/sub", "0750"),
				wRmdir("t", "0755"),
			},
		},
		{
			name:  "rename file",
			lower: baseLower,
			do:    func(f fsops) { f.rename("a.txt", "renamed.txt") },
			want: []wc{
				wDelete("a.txt", "one\ntwo\n", "0644"),
				wCreate("renamed.txt", "one\ntwo\n", "0644", "+one", "+two"),
			},
		},
		{
			name:  "rename file into a dir",
			lower: baseLower,
			do:    func(f fsops) { f.rename("a.txt", "d/a.txt") },
			want: []wc{
				wDelete("a.txt", "one\ntwo\n", "0644"),
				wCreate("d/a.txt", "one\ntwo\n", "0644", "+one"),
			},
		},
		{
			name:  "create then delete is nothing",
			lower: baseLower,
			do: func(f fsops) {
				f.write("tmp.txt", "temp\n")
				f.remove("tmp.txt")
				f.mkdirAll("scratch/x/y")
				f.write("scratch/x/y/z", "z\n")
				f.removeAll("scratch")
				f.write("d/tmp", "t\n")
				f.remove("d/tmp")
			},
		},
		{
			name:  "mkdir",
			lower: baseLower,
			do: func(f fsops) {
				f.mkdir("nd")
				f.chmod("nd", 0o750)
			},
			want: []wc{wMkdir("nd", "0750")},
		},
		{
			name:  "mkdir -p nested with files",
			lower: baseLower,
			do: func(f fsops) {
				f.mkdirAll("x/y/z")
				f.write("x/g", "g\n")
				f.write("x/y/f", "f\n")
				f.mkdirAll("d/deeper/still")
			},
			want: []wc{
				wMkdir("d/deeper", "0755"),
				wMkdir("d/deeper/still", "0755"),
				wMkdir("x", "0755"),
				wCreate("x/g", "g\n", "0644", "+g"),
				wMkdir("x/y", "0755"),
				wCreate("x/y/f", "f\n", "0644", "+f"),
				wMkdir("x/y/z", "0755"),
			},
		},
		{
			name:  "rmdir empty dir",
			lower: with(dir("em", 0o700)),
			do:    func(f fsops) { f.remove("em") },
			want:  []wc{wRmdir("em", "0700")},
		},
		{
			name: "dir replaced by file",
			lower: with(
				dir("t", 0o755),
				file("t/a", "A\n", 0o644),
				dir("t/s", 0o755),
				file("t/s/b", "B\n", 0o644),
			),
			do: func(f fsops) {
				f.removeAll("t")
				f.write("t", "now a file\n")
			},
			want: []wc{
				wDelete("t/a", "A\n", "0644"),
				wDelete("t/s/b", "B\n", "0644"),
				wRmdir("t/s", "0755"),
				wRmdir("t", "0755"),
				wCreate("t", "now a file\n", "0644", "+now a file"),
			},
		},
		{
			name:  "file replaced by dir",
			lower: baseLower,
			do: func(f fsops) {
				f.remove("a.txt")
				f.mkdir("a.txt")
				f.write("a.txt/in", "in\n")
			},
			want: []wc{
				wDelete("a.txt", "one\ntwo\n", "0644"),
				wMkdir("a.txt", "0755"),
				wCreate("a.txt/in", "in\n", "0644", "+in"),
			},
		},
		{
			name:  "file replaced by symlink",
			lower: baseLower,
			do: func(f fsops) {
				f.remove("a.txt")
				f.symlink("d/b.txt", "a.txt")
			},
			want: []wc{
				wDelete("a.txt", "one\ntwo\n", "0644"),
				wSymlink("a.txt", "d/b.txt"),
			},
		},
		{
			name:  "dir replaced by symlink",
			lower: baseLower,
			do: func(f fsops) {
				f.removeAll("d")
				f.symlink("a.txt", "d")
			},
			want: []wc{
				wDelete("d/b.txt", "bee\n", "0644"),
				wRmdir("d", "0755"),
				wSymlink("d", "a.txt"),
			},
		},
		{
			name:  "symlink created",
			lower: baseLower,
			do:    func(f fsops) { f.symlink("a.txt", "ln") },
			want:  []wc{wSymlink("ln", "a.txt")},
		},
		{
			name:  "dangling symlink created",
			lower: baseLower,
			do:    func(f fsops) { f.symlink("/nonexistent/target", "d/dangling") },
			want:  []wc{wSymlink("d/dangling", "/nonexistent/target")},
		},
		{
			name:  "symlink retargeted",
			lower: with(link("ln", "a.txt")),
			do: func(f fsops) {
				f.remove("ln")
				f.symlink("d", "ln")
			},
			want: []wc{wDeleteLink("ln", "a.txt"), wSymlink("ln", "d")},
		},
		{
			name:  "symlink recreated with the same target is no change",
			lower: with(link("ln", "a.txt")),
			do: func(f fsops) {
				f.remove("ln")
				f.symlink("a.txt", "ln")
			},
		},
		{
			name:  "symlink replaced by file",
			lower: with(link("ln", "a.txt")),
			do: func(f fsops) {
				f.remove("ln")
				f.write("ln", "plain\n")
			},
			want: []wc{wDeleteLink("ln", "a.txt"), wCreate("ln", "plain\n", "0644", "+plain")},
		},
		{
			name:  "symlink deleted",
			lower: with(link("ln", "a.txt")),
			do:    func(f fsops) { f.remove("ln") },
			want:  []wc{wDeleteLink("ln", "a.txt")},
		},
		{
			name:  "write through a host symlink modifies its target",
			lower: with(link("ln", "a.txt")),
			do:    func(f fsops) { f.write("ln", "via link\n") },
			want:  []wc{wModify("a.txt", "one\ntwo\n", "via link\n", "0644", "0644", "+via link")},
		},
		{
			name: "dir deleted and recreated (opaque)",
			lower: with(
				dir("o", 0o755),
				file("o/keep", "same\n", 0o644),
				file("o/gone", "bye\n", 0o644),
				file("o/changed", "old\n", 0o644),
				dir("o/sub", 0o755),
				file("o/sub/x", "x\n", 0o644),
			),
			do: func(f fsops) {
				f.removeAll("o")
				f.mkdir("o")
				f.write("o/keep", "same\n")
				f.write("o/changed", "new\n")
				f.write("o/new", "new\n")
			},
			want: []wc{
				wModify("o/changed", "old\n", "new\n", "0644", "0644", "-old", "+new"),
				wDelete("o/gone", "bye\n", "0644"),
				wCreate("o/new", "new\n", "0644", "+new"),
				wDelete("o/sub/x", "x\n", "0644"),
				wRmdir("o/sub", "0755"),
			},
		},
		{
			name: "dir recreated empty with another mode",
			lower: with(
				dir("o", 0o755),
				file("o/f", "f\n", 0o644),
			),
			do: func(f fsops) {
				f.removeAll("o")
				f.mkdir("o")
				f.chmod("o", 0o700)
			},
			want: []wc{wChmodDir("o", "0755", "0700"), wDelete("o/f", "f\n", "0644")},
		},
		{
			name: "dir recreated with a subdir partly recreated",
			lower: with(
				dir("o", 0o755),
				dir("o/sub", 0o755),
				file("o/sub/x", "x\n", 0o644),
				file("o/sub/y", "y\n", 0o644),
				dir("o/sub/deep", 0o755),
				file("o/sub/deep/z", "z\n", 0o644),
				file("o/z", "z\n", 0o644),
			),
			do: func(f fsops) {
				f.removeAll("o")
				f.mkdirAll("o/sub")
				f.write("o/sub/x", "x\n")
			},
			want: []wc{
				wDelete("o/sub/deep/z", "z\n", "0644"),
				wRmdir("o/sub/deep", "0755"),
				wDelete("o/sub/y", "y\n", "0644"),
				wDelete("o/z", "z\n", "0644"),
			},
		},
		{
			name: "dir recreated with a subdir replaced by a file",
			lower: with(
				dir("o", 0o755),
				dir("o/sub", 0o755),
				file("o/sub/x", "x\n", 0o644),
				dir("o/sub/deep", 0o755),
				file("o/sub/deep/y", "y\n", 0o644),
			),
			do: func(f fsops) {
				f.removeAll("o")
				f.mkdir("o")
				f.write("o/sub", "file now\n")
			},
			want: []wc{
				wDelete("o/sub/deep/y", "y\n", "0644"),
				wRmdir("o/sub/deep", "0755"),
				wDelete("o/sub/x", "x\n", "0644"),
				wRmdir("o/sub", "0755"),
				wCreate("o/sub", "file now\n", "0644", "+file now"),
			},
		},
		{
			name: "dir recreated with a subdir replaced by a symlink",
			lower: with(
				dir("o", 0o755),
				dir("o/sub", 0o755),
				file("o/sub/x", "x\n", 0o644),
			),
			do: func(f fsops) {
				f.removeAll("o")
				f.mkdir("o")
				f.symlink("/elsewhere", "o/sub")
			},
			want: []wc{
				wDelete("o/sub/x", "x\n", "0644"),
				wRmdir("o/sub", "0755"),
				wSymlink("o/sub", "/elsewhere"),
			},
		},
		{
			name:  "binary file",
			lower: with(file("bin.dat", "\x00\x01old\xff", 0o644)),
			do: func(f fsops) {
				f.write("bin.dat", "\x00\x02new\xfe")
				f.write("bin2.dat", "\x7fELF\x00\x00")
				f.write("latin1.txt", "caf\xe9\n")
			},
			want: []wc{
				wModify("bin.dat", "\x00\x01old\xff", "\x00\x02new\xfe", "0644", "0644"),
				wCreate("bin2.dat", "\x7fELF\x00\x00", "0644"),
				wCreate("latin1.txt", "caf\xe9\n", "0644"),
			},
		},
		{
			name:  "text file becomes binary",
			lower: baseLower,
			do:    func(f fsops) { f.write("a.txt", "one\x00two\n") },
			want:  []wc{wModify("a.txt", "one\ntwo\n", "one\x00two\n", "0644", "0644")},
		},
		{
			name:  "large text file above diffMax",
			lower: with(file("big.txt", big, 0o644)),
			do: func(f fsops) {
				f.write("big.txt", bigNew)
				f.write("big2.txt", big2)
			},
			want: []wc{
				wModify("big.txt", big, bigNew, "0644", "0644"),
				wCreate("big2.txt", big2, "0644"),
			},
		},
		{
			name:  "large text file shrunk below diffMax",
			lower: with(file("big.txt", big, 0o644)),
			do:    func(f fsops) { f.write("big.txt", "small\n") },
			// the old side is too large to diff
			want: []wc{wModify("big.txt", big, "small\n", "0644", "0644")},
		},
		{
			name:  "setuid, setgid and sticky modes",
			lower: with(file("tool", "#!/bin/sh\n", 0o755)),
			do: func(f fsops) {
				f.chmod("tool", 0o4755)
				f.write("newtool", "#!/bin/sh\necho\n")
				f.chmod("newtool", 0o2755)
				f.mkdir("shared")
				f.chmod("shared", 0o1777)
			},
			want: []wc{
				wCreate("newtool", "#!/bin/sh\necho\n", "2755", "+echo"),
				wMkdir("shared", "1777"),
				wChmod("tool", "#!/bin/sh\n", "0755", "4755"),
			},
		},
		{
			name:  "fifo created",
			lower: baseLower,
			do: func(f fsops) {
				must(f.t, unix.Mkfifo(f.p("d/fifo"), 0o640))
			},
			want: []wc{{path: "d/fifo", op: dryexec.OpCreate, kind: dryexec.KindFIFO, mode: "0640"}},
		},
		{
			name:    "host symlink to outside replaced by a dir",
			lower:   with(link("esc", "$OUT")),
			outside: []node{file("secret", "S\n", 0o644), file("other", "O\n", 0o644)},
			do: func(f fsops) {
				f.remove("esc")
				f.mkdir("esc")
				f.write("esc/secret", "S\n")
			},
			want: []wc{
				wDeleteLink("esc", "$OUT"),
				wMkdir("esc", "0755"),
				// a create (no before_sha256), not "no change": the host's esc/secret
				// is the outside file, which must not have been read
				wCreate("esc/secret", "S\n", "0644", "+S"),
			},
			extra: noOutside,
		},
		{
			name: "opaque dir holding a host symlink to outside",
			lower: with(
				dir("o", 0o755),
				link("o/esc", "$OUT"),
				file("o/f", "f\n", 0o644),
			),
			outside: []node{file("secret", "S\n", 0o644), file("other", "O\n", 0o644)},
			do: func(f fsops) {
				f.removeAll("o")
				f.mkdirAll("o/esc")
				f.write("o/esc/secret", "S\n")
			},
			want: []wc{
				wDeleteLink("o/esc", "$OUT"),
				wMkdir("o/esc", "0755"),
				wCreate("o/esc/secret", "S\n", "0644", "+S"),
				wDelete("o/f", "f\n", "0644"),
			},
			extra: noOutside,
		},
		{
			name:    "opaque dir whose host symlink to outside is not in the upper",
			lower:   with(dir("o", 0o755), link("o/esc", "$OUT")),
			outside: []node{file("secret", "S\n", 0o644)},
			do: func(f fsops) {
				f.removeAll("o")
				f.mkdir("o")
			},
			want:  []wc{wDeleteLink("o/esc", "$OUT")},
			extra: noOutside,
		},
		// Owners: a change carries the path's owner after it (the upper's), a
		// delete or rmdir the host's. A chown alone is a chmod naming the
		// host's owner (before_uid, before_gid).
		{
			name:  "chown only is a chmod",
			lower: baseLower,
			do: func(f fsops) {
				f.chown("a.txt", 1234, 5678)
				f.chown("d", 1234, 5678)
			},
			want: []wc{
				wChmod("a.txt", "one\ntwo\n", "0644", "0644").by(1234, 5678).from(os.Geteuid(), os.Getegid()),
				wChmodDir("d", "0755", "0755").by(1234, 5678).from(os.Geteuid(), os.Getegid()),
			},
		},
		{
			name:  "chown and chmod",
			lower: baseLower,
			do: func(f fsops) {
				f.chown("a.txt", 1234, 5678)
				f.chmod("a.txt", 0o600)
				f.chown("d", 4321, 8765)
				f.chmod("d", 0o750)
			},
			want: []wc{
				wChmod("a.txt", "one\ntwo\n", "0644", "0600").by(1234, 5678).from(os.Geteuid(), os.Getegid()),
				wChmodDir("d", "0755", "0750").by(4321, 8765).from(os.Geteuid(), os.Getegid()),
			},
		},
		{
			name:  "chown and modify",
			lower: baseLower,
			do: func(f fsops) {
				f.write("a.txt", "new\n")
				f.chown("a.txt", 1234, 5678)
			},
			want: []wc{wModify("a.txt", "one\ntwo\n", "new\n", "0644", "0644", "+new").by(1234, 5678).from(os.Geteuid(), os.Getegid())},
		},
		{
			name: "changes to another user's paths keep their owner",
			lower: with(
				ownedBy(1234, 5678, file("theirs", "t\n", 0o644)),
				ownedBy(4321, 8765, dir("tdir", 0o755)),
				ownedBy(1111, 2222, file("tdir/f", "f\n", 0o644)),
			),
			do: func(f fsops) {
				f.chmod("theirs", 0o600)
				f.chmod("tdir", 0o700)
				f.write("tdir/f", "F\n")
			},
			want: []wc{
				wChmodDir("tdir", "0755", "0700").by(4321, 8765),
				wModify("tdir/f", "f\n", "F\n", "0644", "0644", "+F").by(1111, 2222),
				wChmod("theirs", "t\n", "0644", "0600").by(1234, 5678),
			},
		},
		{
			name:  "new paths with owners",
			lower: baseLower,
			do: func(f fsops) {
				f.write("new", "n\n")
				f.chown("new", 1234, 5678)
				f.mkdir("nd")
				f.chown("nd", 2000, 3000)
				f.symlink("a.txt", "ln")
				f.chown("ln", 3000, 4000)
				must(f.t, unix.Mkfifo(f.p("fifo"), 0o640))
				f.chown("fifo", 5, 6)
				f.chmod("fifo", 0o640)
			},
			want: []wc{
				{path: "fifo", op: dryexec.OpCreate, kind: dryexec.KindFIFO, mode: "0640", owned: true, uid: 5, gid: 6},
				wSymlink("ln", "a.txt").by(3000, 4000),
				wMkdir("nd", "0755").by(2000, 3000),
				wCreate("new", "n\n", "0644", "+n").by(1234, 5678),
			},
		},
		{
			name: "deletes carry the host's owners",
			lower: with(
				ownedBy(1234, 5678, dir("t", 0o755)),
				ownedBy(1111, 2222, file("t/f", "f\n", 0o644)),
				ownedBy(3333, 4444, link("t/ln", "f")),
				ownedBy(5555, 6666, file("gone", "g\n", 0o600)),
			),
			do: func(f fsops) {
				f.removeAll("t")
				f.remove("gone")
			},
			want: []wc{
				wDelete("gone", "g\n", "0600").by(5555, 6666),
				wDelete("t/f", "f\n", "0644").by(1111, 2222),
				wDeleteLink("t/ln", "f").by(3333, 4444),
				wRmdir("t", "0755").by(1234, 5678),
			},
		},
		{
			name: "opaque dir: deletes carry the host's owners",
			lower: with(
				ownedBy(1234, 5678, dir("o", 0o755)),
				ownedBy(1111, 2222, file("o/x", "x\n", 0o644)),
			),
			do: func(f fsops) {
				f.removeAll("o")
				f.mkdir("o")
			},
			// o is now the test user's, as after the native run.
			want: []wc{
				wChmodDir("o", "0755", "0755").by(os.Geteuid(), os.Getegid()).from(1234, 5678),
				wDelete("o/x", "x\n", "0644").by(1111, 2222),
			},
		},
		{
			name:  "another user's file replaced by a dir",
			lower: with(ownedBy(1234, 5678, file("r", "r\n", 0o644))),
			do: func(f fsops) {
				f.remove("r")
				f.mkdir("r")
			},
			want: []wc{wDelete("r", "r\n", "0644").by(1234, 5678), wMkdir("r", "0755")},
		},
		{
			name: "several changes at once",
			lower: with(
				dir("t", 0o755),
				file("t/x", "x\n", 0o644),
				file("zz", "zz\n", 0o644),
			),
			do: func(f fsops) {
				f.write("zz", "ZZ\n")
				f.removeAll("t")
				f.write("t", "t\n")
				f.remove("d/b.txt")
				f.write("d/c.txt", "see\n")
				f.write("a-b", "dash\n")
				f.mkdir("a")
				f.write("a/b", "slash\n")
			},
			// component order: "a" < "a-b" < "a.txt" < "d" < "t" < "zz"
			want: []wc{
				wMkdir("a", "0755"),
				wCreate("a/b", "slash\n", "0644", "+slash"),
				wCreate("a-b", "dash\n", "0644", "+dash"),
				wDelete("d/b.txt", "bee\n", "0644"),
				wCreate("d/c.txt", "see\n", "0644", "+see"),
				wDelete("t/x", "x\n", "0644"),
				wRmdir("t", "0755"),
				wCreate("t", "t\n", "0644", "+t"),
				wModify("zz", "zz\n", "ZZ\n", "0644", "0644", "-zz", "+ZZ"),
			},
		},
		// Names are bytes: two host names that differ only in bytes that are
		// not UTF-8 (one of them the U+FFFD the JSON form would turn them
		// into) stay two names, and a deletion names the right one.
		{
			name: "names that are not UTF-8",
			lower: with(
				file("v\xff", "bytes\n", 0o644),
				file("v\ufffd", "replacement\n", 0o644),
				link("l\xfe", "t\xff"),
				dir("d\xff", 0o755),
				file("d\xff/in\xfe", "in\n", 0o644),
			),
			do: func(f fsops) {
				f.remove("v\xff")
				f.write("bad\xff\xfe.txt", "new\n")
				f.symlink("to\xff\xfe", "s\xff")
				f.remove("l\xfe")
				f.symlink("t\xfe", "l\xfe")
				f.write("d\xff/in\xfe", "changed\n")
			},
			want: []wc{
				wCreate("bad\xff\xfe.txt", "new\n", "0644", "+new"),
				wModify("d\xff/in\xfe", "in\n", "changed\n", "0644", "0644", "-in", "+changed"),
				wDeleteLink("l\xfe", "t\xff"),
				wSymlink("l\xfe", "t\xfe"),
				wSymlink("s\xff", "to\xff\xfe"),
				wDelete("v\xff", "bytes\n", "0644"),
			},
		},
		{
			name:  "socket stays other",
			lower: baseLower,
			do: func(f fsops) {
				fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
				must(f.t, err)
				defer unix.Close(fd)
				must(f.t, unix.Bind(fd, &unix.SockaddrUnix{Name: f.p("sock")}))
				f.chmod("sock", 0o700)
			},
			want: []wc{{path: "sock", op: dryexec.OpCreate, kind: dryexec.KindOther, mode: "0700"}},
		},
		{
			name:  "host fifo chmod-ed is recreated",
			lower: with(fifo("p", 0o644)),
			do:    func(f fsops) { f.chmod("p", 0o600) },
			want: []wc{
				{path: "p", op: dryexec.OpDelete, kind: dryexec.KindFIFO, mode: "0644"},
				{path: "p", op: dryexec.OpCreate, kind: dryexec.KindFIFO, mode: "0600"},
			},
		},
		// mtimes: what the command left is in the change (checkMtimes, for
		// every case); a change of mtime alone is no change ("touch only").
		{
			name:  "mtimes set back on new paths",
			lower: baseLower,
			do: func(f fsops) {
				f.mkdir("n")
				f.write("n/f", "f\n")
				f.symlink("f", "n/l")
				f.write("a.txt", "one\nthree\n")
				ts := []unix.Timespec{{Sec: 981173106, Nsec: 123456789}, {Sec: 981173106, Nsec: 123456789}}
				for _, p := range []string{"n/f", "n/l", "n", "a.txt"} {
					must(f.t, unix.UtimesNanoAt(unix.AT_FDCWD, f.p(p), ts, unix.AT_SYMLINK_NOFOLLOW))
				}
			},
			want: []wc{
				wModify("a.txt", "one\ntwo\n", "one\nthree\n", "0644", "0644", "-two", "+three"),
				wMkdir("n", "0755"),
				wCreate("n/f", "f\n", "0644", "+f"),
				wSymlink("n/l", "f"),
			},
			extra: func(t *testing.T, lower, outside string, got []dryexec.FileChange) {
				for _, c := range got {
					if c.MtimeNS != 981173106123456789 {
						t.Errorf("%s: mtime_ns %d, want the one set", c.Path, c.MtimeNS)
					}
				}
			},
		},
		// Hard links: every path of one inode in the delta shares a link group.
		{
			name:  "hard links of a new file",
			lower: baseLower,
			do: func(f fsops) {
				f.write("n", "n\n")
				f.link("n", "m")
				f.link("n", "d/o")
				f.write("single", "s\n")
			},
			want: []wc{
				wCreate("d/o", "n\n", "0644", "+n"),
				wCreate("m", "n\n", "0644", "+n"),
				wCreate("n", "n\n", "0644", "+n"),
				wCreate("single", "s\n", "0644", "+s"),
			},
			groups: [][]string{{"d/o", "m", "n"}},
		},
		{
			name:  "hard link to a host file",
			lower: baseLower,
			do:    func(f fsops) { f.link("a.txt", "d/al") },
			// The host file is unchanged but is now one inode with d/al: a
			// modify with its own content, so commit can link d/al to it.
			want: []wc{
				wModify("a.txt", "one\ntwo\n", "one\ntwo\n", "0644", "0644"),
				wCreate("d/al", "one\ntwo\n", "0644", "+one"),
			},
			groups: [][]string{{"a.txt", "d/al"}},
		},
		{
			name:  "hard link to a host file, written through the link",
			lower: baseLower,
			do: func(f fsops) {
				f.link("a.txt", "al")
				f.write("al", "new\n")
			},
			want: []wc{
				wModify("a.txt", "one\ntwo\n", "new\n", "0644", "0644", "-one", "+new"),
				wCreate("al", "new\n", "0644", "+new"),
			},
			groups: [][]string{{"a.txt", "al"}},
		},
		{
			name:  "two host files made one",
			lower: with(file("same1", "same\n", 0o644), file("same2", "same\n", 0o644)),
			do: func(f fsops) {
				f.remove("same2")
				f.link("same1", "same2")
			},
			want: []wc{
				wModify("same1", "same\n", "same\n", "0644", "0644"),
				wModify("same2", "same\n", "same\n", "0644", "0644"),
			},
			groups: [][]string{{"same1", "same2"}},
		},
		{
			name:  "hard link made and its other path removed",
			lower: baseLower,
			do: func(f fsops) {
				f.link("a.txt", "al")
				f.remove("a.txt")
			},
			want: []wc{
				wDelete("a.txt", "one\ntwo\n", "0644"),
				wCreate("al", "one\ntwo\n", "0644", "+one"),
			},
		},
		{
			name: "cp -al of a host tree",
			lower: with(
				dir("d/sub", 0o750),
				file("d/sub/c", "c\n", 0o600),
				link("d/ln", "b.txt"),
			),
			do: func(f fsops) {
				// What cp -al and tar's hard-link members do: mkdir, link.
				f.mkdir("e")
				f.mkdir("e/sub")
				f.link("d/b.txt", "e/b.txt")
				f.link("d/sub/c", "e/sub/c")
				f.symlink("b.txt", "e/ln")
			},
			want: []wc{
				wModify("d/b.txt", "bee\n", "bee\n", "0644", "0644"),
				wModify("d/sub/c", "c\n", "c\n", "0600", "0600"),
				wMkdir("e", "0755"),
				wCreate("e/b.txt", "bee\n", "0644", "+bee"),
				wSymlink("e/ln", "b.txt"),
				wMkdir("e/sub", "0755"),
				wCreate("e/sub/c", "c\n", "0600", "+c"),
			},
			groups: [][]string{{"d/b.txt", "e/b.txt"}, {"d/sub/c", "e/sub/c"}},
		},
		// Dirs renamed with rename(2) (redirect_dir=on): the old tree deleted,
		// every path of the new one created with its content.
		{
			name:     "rename a host dir",
			redirect: true,
			lower: with(
				dir("d/sub", 0o750),
				file("d/sub/c", "c\n", 0o600),
				link("d/ln", "b.txt"),
			),
			do: func(f fsops) { f.rename("d", "d2") },
			want: []wc{
				wDelete("d/b.txt", "bee\n", "0644"),
				wDeleteLink("d/ln", "b.txt"),
				wDelete("d/sub/c", "c\n", "0600"),
				wRmdir("d/sub", "0750"),
				wRmdir("d", "0755"),
				wMkdir("d2", "0755"),
				wCreate("d2/b.txt", "bee\n", "0644", "+bee"),
				wSymlink("d2/ln", "b.txt"),
				wMkdir("d2/sub", "0750"),
				wCreate("d2/sub/c", "c\n", "0600", "+c"),
			},
		},
		{
			name:     "rename a host dir, then change inside",
			redirect: true,
			lower: with(
				dir("d/sub", 0o750),
				file("d/sub/c", "c\n", 0o600),
				link("d/ln", "b.txt"),
			),
			do: func(f fsops) {
				f.rename("d", "d2")
				f.write("d2/b.txt", "changed\n")
				f.remove("d2/sub/c")
				f.write("d2/new", "n\n")
				f.chmod("d2/sub", 0o700)
			},
			want: []wc{
				wDelete("d/b.txt", "bee\n", "0644"),
				wDeleteLink("d/ln", "b.txt"),
				wDelete("d/sub/c", "c\n", "0600"),
				wRmdir("d/sub", "0750"),
				wRmdir("d", "0755"),
				wMkdir("d2", "0755"),
				wCreate("d2/b.txt", "changed\n", "0644", "+changed"),
				wSymlink("d2/ln", "b.txt"),
				wCreate("d2/new", "n\n", "0644", "+n"),
				wMkdir("d2/sub", "0700"),
			},
		},
		{
			name:     "rename a dir twice",
			redirect: true,
			lower: with(
				dir("d/sub", 0o750),
				file("d/sub/c", "c\n", 0o600),
				link("d/ln", "b.txt"),
			),
			do: func(f fsops) {
				f.rename("d", "d2")
				f.rename("d2", "d3")
			},
			want: []wc{
				wDelete("d/b.txt", "bee\n", "0644"),
				wDeleteLink("d/ln", "b.txt"),
				wDelete("d/sub/c", "c\n", "0600"),
				wRmdir("d/sub", "0750"),
				wRmdir("d", "0755"),
				wMkdir("d3", "0755"),
				wCreate("d3/b.txt", "bee\n", "0644", "+bee"),
				wSymlink("d3/ln", "b.txt"),
				wMkdir("d3/sub", "0750"),
				wCreate("d3/sub/c", "c\n", "0600", "+c"),
			},
		},
		{
			name:     "rename into a subdir",
			redirect: true,
			lower: append(with(
				dir("d/sub", 0o750),
				file("d/sub/c", "c\n", 0o600),
				link("d/ln", "b.txt"),
			), dir("e", 0o755)),
			do: func(f fsops) { f.rename("d", "e/d") },
			want: []wc{
				wDelete("d/b.txt", "bee\n", "0644"),
				wDeleteLink("d/ln", "b.txt"),
				wDelete("d/sub/c", "c\n", "0600"),
				wRmdir("d/sub", "0750"),
				wRmdir("d", "0755"),
				wMkdir("e/d", "0755"),
				wCreate("e/d/b.txt", "bee\n", "0644", "+bee"),
				wSymlink("e/d/ln", "b.txt"),
				wMkdir("e/d/sub", "0750"),
				wCreate("e/d/sub/c", "c\n", "0600", "+c"),
			},
		},
		{
			name:     "rename a dir, then its subdir out of it",
			redirect: true,
			lower: with(
				dir("d/sub", 0o750),
				file("d/sub/c", "c\n", 0o600),
				link("d/ln", "b.txt"),
			),
			do: func(f fsops) {
				f.rename("d", "d2")
				f.rename("d2/sub", "s")
			},
			want: []wc{
				wDelete("d/b.txt", "bee\n", "0644"),
				wDeleteLink("d/ln", "b.txt"),
				wDelete("d/sub/c", "c\n", "0600"),
				wRmdir("d/sub", "0750"),
				wRmdir("d", "0755"),
				wMkdir("d2", "0755"),
				wCreate("d2/b.txt", "bee\n", "0644", "+bee"),
				wSymlink("d2/ln", "b.txt"),
				wMkdir("s", "0750"),
				wCreate("s/c", "c\n", "0600", "+c"),
			},
		},
		{
			name:     "rename a dir, then a subdir within it",
			redirect: true,
			lower: with(
				dir("d/sub", 0o750),
				file("d/sub/c", "c\n", 0o600),
			),
			do: func(f fsops) {
				f.rename("d", "d2")
				f.rename("d2/sub", "d2/sub2") // a relative redirect, below a redirected dir
			},
			want: []wc{
				wDelete("d/b.txt", "bee\n", "0644"),
				wDelete("d/sub/c", "c\n", "0600"),
				wRmdir("d/sub", "0750"),
				wRmdir("d", "0755"),
				wMkdir("d2", "0755"),
				wCreate("d2/b.txt", "bee\n", "0644", "+bee"),
				wMkdir("d2/sub2", "0750"),
				wCreate("d2/sub2/c", "c\n", "0600", "+c"),
			},
		},
		{
			name:     "rename over an empty host dir",
			redirect: true,
			lower:    with(dir("t", 0o700)),
			do:       func(f fsops) { f.rename("d", "t") },
			// The host's t stays (a chmod), and gets d's tree.
			want: []wc{
				wDelete("d/b.txt", "bee\n", "0644"),
				wRmdir("d", "0755"),
				wChmodDir("t", "0700", "0755"),
				wCreate("t/b.txt", "bee\n", "0644", "+bee"),
			},
		},
		{
			name:     "rename over an emptied host dir",
			redirect: true,
			lower:    with(dir("t", 0o755), file("t/x", "x\n", 0o644)),
			do: func(f fsops) {
				f.remove("t/x")
				f.rename("d", "t")
			},
			want: []wc{
				wDelete("d/b.txt", "bee\n", "0644"),
				wRmdir("d", "0755"),
				wCreate("t/b.txt", "bee\n", "0644", "+bee"),
				wDelete("t/x", "x\n", "0644"),
			},
		},
		{
			name:     "rename a dir and back",
			redirect: true,
			lower: with(
				dir("d/sub", 0o750),
				file("d/sub/c", "c\n", 0o600),
				link("d/ln", "b.txt"),
			),
			do: func(f fsops) {
				f.rename("d", "d2")
				f.rename("d2", "d")
			},
		},
		{
			name:     "rename a dir holding hard links",
			redirect: true,
			lower:    with(hardlink("d/b2", "d/b.txt")),
			do:       func(f fsops) { f.rename("d", "d2") },
			want: []wc{
				wDelete("d/b.txt", "bee\n", "0644"),
				wDelete("d/b2", "bee\n", "0644"),
				wRmdir("d", "0755"),
				wMkdir("d2", "0755"),
				wCreate("d2/b.txt", "bee\n", "0644", "+bee"),
				wCreate("d2/b2", "bee\n", "0644", "+bee"),
			},
			groups: [][]string{{"d2/b.txt", "d2/b2"}},
		},
	}
}

// noOutside checks that nothing of the outside dir made it into the changes.
func noOutside(t *testing.T, lower, outside string, got []dryexec.FileChange) {
	for _, c := range got {
		if strings.HasPrefix(c.Path, outside) || strings.HasSuffix(c.Path, "/other") {
			t.Errorf("change reports an outside file: %+v", c)
		}
		if strings.HasSuffix(c.Path, "/secret") && c.BeforeSHA256 != "" {
			t.Errorf("the outside secret was read: %+v", c)
		}
	}
}

// overlayModes are the two ways the product mounts overlays (guest/overlay_linux.go):
// as root (trusted.* xattrs) and rootless (userxattr: user.* xattrs).
var overlayModes = []struct {
	name      string
	opts      string
	userXattr bool
	redirects bool
}{
	{"trusted", "redirect_dir=nofollow,metacopy=off,index=off", false, false},
	{"userxattr", "redirect_dir=nofollow,metacopy=off,index=off,userxattr", true, false},
	{"redirect", "redirect_dir=on,metacopy=off,index=off", false, true},
}

func TestOverlayDelta(t *testing.T) {
	rootOrSkip(t)
	for _, mode := range overlayModes {
		t.Run(mode.name, func(t *testing.T) {
			for _, c := range overlayCases() {
				if c.redirect && !mode.redirects {
					continue // TestDirRenameWithoutRedirect
				}
				t.Run(c.name, func(t *testing.T) {
					runOverlayCase(t, c, mode.opts, fswalk.WalkOptions{UserXattr: mode.userXattr, Redirects: mode.redirects})
				})
			}
		})
	}
}

func runOverlayCase(t *testing.T, c ovCase, opts string, wo fswalk.WalkOptions) {
	base := tempDir(t)
	lower, outside := base+"/lower", base+"/outside"
	must(t, os.Mkdir(lower, 0o755))
	must(t, os.Mkdir(outside, 0o755))
	buildTree(t, outside, c.outside)
	nodes := append([]node{}, c.lower...)
	for i := range nodes {
		nodes[i].link = strings.ReplaceAll(nodes[i].link, "$OUT", outside)
	}
	buildTree(t, lower, nodes)
	if c.oldTimes {
		ageTree(t, lower)
	}
	lowerBefore, outsideBefore := snapshot(t, lower), snapshot(t, outside)

	lowerStates := pathStates(t, lower)
	o := mountOverlay(t, lower, opts)
	c.do(fsops{t, o.merged})
	view := contentTree(t, o.merged)
	times := mtimes(t, o.merged)
	viewStates := pathStates(t, o.merged)
	o.unmount()

	got, touched, blobs := diffUpperAll(t, o.upper, lower, wo, diffMax)
	checkTouched(t, lower, got, touched, lowerStates, viewStates, c.touched)
	want := append([]wc{}, c.want...)
	for i := range want {
		want[i].link = strings.ReplaceAll(want[i].link, "$OUT", outside)
	}
	checkChanges(t, lower, got, want)
	checkMtimes(t, lower, got, times)
	checkGroups(t, lower, got, c.groups)
	if c.extra != nil {
		c.extra(t, lower, outside, got)
	}
	checkSameSnapshot(t, "lower", lowerBefore, snapshot(t, lower))
	checkSameSnapshot(t, "outside", outsideBefore, snapshot(t, outside))

	// The delta, applied in order to a copy of the lower, gives the merged view.
	cp := base + "/applied"
	copyTree(t, lower, cp)
	applyChanges(t, lower, cp, blobs, got)
	if t.Failed() {
		return
	}
	applied := contentTree(t, cp)
	checkSameSnapshot(t, "applied delta vs merged view", view, applied)
}

// mtimes returns the mtime of every path below root, relative to it.
func mtimes(t testing.TB, root string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	err := filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		out[rel] = st.Mtim.Nano()
		return nil
	})
	must(t, err)
	return out
}

// checkMtimes checks that every change but a deletion carries the mtime the
// merged view showed (what the command left), and a deletion none.
func checkMtimes(t testing.TB, lower string, got []dryexec.FileChange, view map[string]int64) {
	t.Helper()
	for _, c := range got {
		rel := strings.TrimPrefix(c.Path, lower+"/")
		if c.Op == dryexec.OpDelete || c.Op == dryexec.OpRmdir {
			if c.MtimeNS != 0 {
				t.Errorf("%s %s has an mtime", c.Op, dryexec.QuotePath(rel))
			}
			continue
		}
		if want, ok := view[rel]; !ok || c.MtimeNS != want {
			t.Errorf("%s %s: mtime_ns %d, the merged view has %d", c.Op, dryexec.QuotePath(rel), c.MtimeNS, want)
		}
	}
}

// checkGroups checks that the changes' link groups are exactly groups.
func checkGroups(t testing.TB, lower string, got []dryexec.FileChange, groups [][]string) {
	t.Helper()
	byPath := map[string]int{}
	for _, c := range got {
		if c.Op != dryexec.OpDelete && c.Op != dryexec.OpRmdir {
			byPath[strings.TrimPrefix(c.Path, lower+"/")] = c.LinkGroup
		} else if c.LinkGroup != 0 {
			t.Errorf("%s %s has a link group", c.Op, c.Path)
		}
	}
	inGroup := map[string]bool{}
	used := map[int]bool{}
	for _, g := range groups {
		id := byPath[g[0]]
		if id == 0 || used[id] {
			t.Errorf("%s: link group %d, want a group of its own with %q", g[0], id, g)
		}
		used[id] = true
		for _, p := range g {
			inGroup[p] = true
			if byPath[p] != id {
				t.Errorf("%s: link group %d, want %d (that of %s)", p, byPath[p], id, g[0])
			}
		}
	}
	for p, id := range byPath {
		if id != 0 && !inGroup[p] {
			t.Errorf("%s: link group %d, want none", p, id)
		}
	}
}

// contentTree describes what is below root, relative to it, without times.
func contentTree(t testing.TB, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		desc := fmt.Sprintf("fmt=%o perm=%04o", st.Mode&unix.S_IFMT, st.Mode&07777)
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" sha=%s nlink=%d", sha(string(b)), st.Nlink)
		case unix.S_IFLNK:
			l, _ := os.Readlink(p)
			desc += " link=" + l
			desc = strings.Replace(desc, "perm=0777", "", 1)
		}
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// copyTree copies src to dst (which must not exist), never following symlinks;
// hard links in src are hard links in dst.
func copyTree(t testing.TB, src, dst string) {
	t.Helper()
	inodes := map[uint64]string{}
	err := filepath.WalkDir(src, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			if err := os.Mkdir(to, 0o700); err != nil {
				return err
			}
		case unix.S_IFREG:
			if first, ok := inodes[st.Ino]; ok {
				return os.Link(first, to)
			}
			inodes[st.Ino] = to
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			if err := os.WriteFile(to, b, 0o600); err != nil {
				return err
			}
		case unix.S_IFLNK:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(l, to)
		case unix.S_IFIFO:
			if err := unix.Mkfifo(to, 0o600); err != nil {
				return err
			}
		default:
			return fmt.Errorf("copyTree: unexpected file type of %s", p)
		}
		return unix.Chmod(to, st.Mode&07777)
	})
	if err != nil {
		t.Fatal(err)
	}
}

// applyChanges applies changes, in order, to dst, a copy of the host dir lower,
// taking new file contents from blobs. Every change must apply exactly: a delete
// finds a file (with its before_sha256), an rmdir an empty dir, a create nothing.
// The second and later paths of a link group are linked to the first.
func applyChanges(t testing.TB, lower, dst string, blobs memBlobs, changes []dryexec.FileChange) {
	t.Helper()
	firstOfGroup := map[int]string{}
	for _, c := range changes {
		rel, ok := strings.CutPrefix(c.Path, lower+"/")
		if !ok {
			t.Errorf("change outside the lower: %+v", c)
			continue
		}
		p := filepath.Join(dst, rel)
		var mode uint32
		fmt.Sscanf(c.Mode, "%o", &mode)
		checkBefore := func() {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Errorf("%s %s: %v", c.Op, rel, err)
			} else if sha(string(b)) != c.BeforeSHA256 {
				t.Errorf("%s %s: before_sha256 %s is not the host's", c.Op, rel, c.BeforeSHA256)
			}
		}
		newContent := func() []byte {
			b, ok := blobs[c.SHA256]
			if !ok {
				t.Errorf("%s %s: content not kept", c.Op, rel)
			}
			if sha(string(b)) != c.SHA256 || int64(len(b)) != c.Size {
				t.Errorf("%s %s: sha256/size do not match the content kept", c.Op, rel)
			}
			return b
		}
		if first, ok := firstOfGroup[c.LinkGroup]; ok && c.LinkGroup != 0 {
			if c.Op == dryexec.OpModify {
				checkBefore()
				must(t, unix.Unlink(p))
			}
			if err := unix.Link(first, p); err != nil {
				t.Errorf("linking %s to %s: %v", rel, first, err)
			}
			continue
		}
		if c.LinkGroup != 0 {
			firstOfGroup[c.LinkGroup] = p
		}
		var err error
		switch c.Op {
		case dryexec.OpDelete:
			if c.Kind == dryexec.KindFile {
				checkBefore()
			}
			err = unix.Unlink(p)
		case dryexec.OpRmdir:
			err = unix.Rmdir(p)
		case dryexec.OpMkdir:
			if err = unix.Mkdir(p, 0o700); err == nil {
				err = unix.Chmod(p, mode)
			}
		case dryexec.OpSymlink:
			err = unix.Symlink(c.LinkTarget, p)
		case dryexec.OpCreate:
			switch c.Kind {
			case dryexec.KindFIFO:
				err = unix.Mkfifo(p, mode)
			case dryexec.KindOther:
				// The only kind of "other" the cases make.
				err = unix.Mknod(p, unix.S_IFSOCK|mode, 0)
			}
			if c.Kind != dryexec.KindFile {
				break
			}
			var f *os.File
			f, err = os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
			if err == nil {
				_, err = f.Write(newContent())
				f.Close()
			}
		case dryexec.OpModify:
			checkBefore()
			var st os.FileInfo
			if st, err = os.Lstat(p); err == nil && !st.Mode().IsRegular() {
				err = fmt.Errorf("not a regular file")
			}
			if err == nil {
				err = os.WriteFile(p, newContent(), 0)
			}
		case dryexec.OpChmod:
			if c.Kind == dryexec.KindFile {
				checkBefore()
				if !bytes.Equal(newContent(), mustRead(t, p)) {
					t.Errorf("chmod %s: content differs", rel)
				}
			}
			_, err = os.Lstat(p)
		}
		if err == nil && c.OwnerChanged() {
			err = unix.Lchown(p, c.UID, c.GID)
		}
		if err == nil && c.Op != dryexec.OpDelete && c.Op != dryexec.OpRmdir && c.Kind != dryexec.KindSymlink {
			err = unix.Chmod(p, mode)
		}
		if err != nil {
			t.Errorf("applying %s %s: %v", c.Op, rel, err)
		}
	}
}

func mustRead(t testing.TB, p string) []byte {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Error(err)
	}
	return b
}

// Without redirect_dir (rootless, where overlayfs refuses it, and sessions)
// renaming a host dir fails with EXDEV, as it does in the sandbox: mv falls
// back to copy and delete.
func TestDirRenameWithoutRedirect(t *testing.T) {
	rootOrSkip(t)
	for _, mode := range overlayModes {
		t.Run(mode.name, func(t *testing.T) {
			lower := tempDir(t)
			buildTree(t, lower, baseLower)
			o := mountOverlay(t, lower, mode.opts)
			err := os.Rename(o.merged+"/d", o.merged+"/d2")
			if mode.redirects != (err == nil) {
				t.Fatalf("rename of a host dir: %v", err)
			}
			if err != nil && !errors.Is(err, unix.EXDEV) {
				t.Fatalf("rename of a host dir: %v, want EXDEV", err)
			}
		})
	}
}
