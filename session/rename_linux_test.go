package session

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/dryexec/dryexec/internal/rootless"
	"github.com/dryexec/dryexec/internal/testreq"
)

// renameScript renames baseline dirs with rename(2) itself (no copy
// fallback, as mv has) and prints, per case, "name: ok" or the errno's name.
// The failure cases must fail exactly as on a real disk.
const renameScript = `
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def r(name, a, b, flags=0):
    if libc.renameat2(-100, a.encode(), -100, b.encode(), flags) == 0:
        print(name + ": ok")
    else:
        print(name + ": " + errno.errorcode[ctypes.get_errno()])
r("plain", "proj/build", "proj/build.old")
r("across", "proj/src", "dst/src")
r("onto_empty", "proj/lib", "dst/empty")
r("onto_nonempty", "proj/doc", "dst/full")
r("into_itself", "proj/doc", "proj/doc/inner")
r("dir_over_file", "proj/doc", "dst/file")
r("file_over_dir", "dst/file", "proj/doc")
r("noreplace", "proj/doc", "dst/full", 1)
r("noreplace_new", "proj/doc", "dst/doc2", 1)
r("back", "proj/build.old", "proj/build2")
st = os.lstat("dst/src/sub/x")
print("links", st.st_nlink, os.path.samestat(st, os.lstat("dst/src/sub/x2")))
print("mode", oct(os.stat("dst/src/sub").st_mode & 0o7777))
print("link", os.readlink("dst/src/l"))
`

const renameWant = `plain: ok
across: ok
onto_empty: ok
onto_nonempty: ENOTEMPTY
into_itself: EINVAL
dir_over_file: ENOTDIR
file_over_dir: EISDIR
noreplace: EEXIST
noreplace_new: ok
back: ok
links 2 True
mode 0o750
link ../top.txt
`

// TestSessionDirRename: in an ns session, rename(2) of a dir of the baseline
// (the workspace overlay's lower) works as on a real disk, root and rootless;
// the diff reports it as the old files deleted and the new ones written, and
// after a rebase the workspace still shows the renamed trees and the diff is
// empty. Before, the workspace overlay had redirect_dir=nofollow and every
// such rename failed with EXDEV.
func TestSessionDirRename(t *testing.T) {
	if os.Getuid() == 0 && !rootless.Active() {
		t.Run("rootless", func(t *testing.T) { rootless.Rerun(t, "^TestSessionDirRename$", 3*time.Minute) })
	}
	testreq.NeedPython(t)
	src := t.TempDir()
	for p, c := range map[string]string{
		"top.txt": "top\n", "proj/build/b.o": "b\n", "proj/src/s.py": "s\n", "proj/src/sub/x": "x\n",
		"proj/lib/l.so": "l\n", "proj/doc/d.md": "d\n", "dst/full/f": "f\n", "dst/file": "file\n",
	} {
		if err := os.MkdirAll(filepath.Join(src, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(src, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"dst/empty", "proj/doc/inner"} {
		if err := os.Mkdir(filepath.Join(src, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink("../top.txt", filepath.Join(src, "proj/src/l")); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(src, "proj/src/sub"), 0o750); err != nil {
		t.Fatal(err)
	}
	s := openRung(t, "ns", Options{Net: []string{"none"}, NetCADir: filepath.Join(t.TempDir(), "ca"),
		Env: map[string]string{"PATH": "/usr/bin:/bin"}})
	if err := s.PushDir(testCtx(t), src); err != nil {
		t.Fatal(err)
	}
	// The hard link is made in the session (a push does not keep links).
	sh(t, s, "ln proj/src/sub/x proj/src/sub/x2")
	if _, err := s.Diff(testCtx(t), true); err != nil {
		t.Fatal(err)
	}
	if got := sh(t, s, "/usr/bin/python3 -c '"+renameScript+"'"); got != renameWant {
		t.Errorf("renames:\n%s\nwant:\n%s", got, renameWant)
	}
	d, err := s.Diff(testCtx(t), false)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(d.Deletes)
	wantDel := []string{"proj/build/b.o", "proj/doc/d.md", "proj/lib/l.so", "proj/src/l", "proj/src/s.py", "proj/src/sub/x", "proj/src/sub/x2"}
	if !slices.Equal(d.Deletes, wantDel) {
		t.Errorf("deletes %q, want %q", d.Deletes, wantDel)
	}
	wantW := map[string]string{"proj/build2/b.o": "b\n", "dst/src/s.py": "s\n", "dst/src/sub/x": "x\n",
		"dst/src/sub/x2": "x\n", "dst/empty/l.so": "l\n", "dst/doc2/d.md": "d\n"}
	for p, c := range wantW {
		if string(d.Writes[p]) != c {
			t.Errorf("write %s: %q, want %q", p, d.Writes[p], c)
		}
	}
	if d.Links["dst/src/l"] != "../top.txt" {
		t.Errorf("links %q", d.Links)
	}
	if len(d.Writes) != len(wantW) {
		t.Errorf("writes %d: %q", len(d.Writes), mapKeys(d.Writes))
	}
	// Rebase folds the renamed trees into the baseline: the workspace
	// shows the same, and nothing is left to diff.
	const list = "find . -type d -print0 | sort -z | xargs -0 stat -c '%n %a'; find . ! -type d -print0 | sort -z | xargs -0 stat -c '%n %F %a %h %s'"
	before := sh(t, s, list)
	if _, err := s.Diff(testCtx(t), true); err != nil {
		t.Fatal(err)
	}
	if after := sh(t, s, list); after != before {
		t.Errorf("the workspace after rebase:\n%s\nbefore:\n%s", after, before)
	}
	d, err = s.Diff(testCtx(t), false)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Writes)+len(d.Deletes)+len(d.Links)+len(d.Modes) != 0 {
		t.Errorf("diff after rebase: %+v", d)
	}
	if m := sh(t, s, "stat -c %a dst/src/sub"); m != "750\n" {
		t.Errorf("dst/src/sub lost its mode:\n%s", before)
	}
	// Renamed again after the rebase (the dirs are baseline dirs again).
	if got := sh(t, s, "/usr/bin/python3 -c 'import os; os.rename(\"dst/src\", \"src3\"); print(sorted(os.listdir(\"src3\")))'"); got != "['l', 's.py', 'sub']\n" {
		t.Errorf("rename after rebase: %q", got)
	}
}
