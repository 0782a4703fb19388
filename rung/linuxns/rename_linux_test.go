package linuxns

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/commit"
	"github.com/dryexec/dryexec/internal/testreq"
)

// dirRenameScript renames host dirs with rename(2)/renameat2 themselves (no
// copy fallback, as mv has) and prints each call's result: "ok" or the
// errno's name. Run natively and in a trial on identical trees, the two
// outputs must be equal, and so must the trees once the trial is committed.
const dirRenameScript = `
import ctypes, errno, os
libc = ctypes.CDLL(None, use_errno=True)
def r(name, a, b, flags=0, olddir=-100, newdir=-100):
    if libc.renameat2(olddir, a.encode(), newdir, b.encode(), flags) == 0:
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
r("trailing_slash", "keep/", "kept/")
r("file_trailing_slash", "dst/file/", "dst/file2")
r("missing", "nothere", "dst/nothere")
fd = os.open("proj", os.O_RDONLY | os.O_DIRECTORY)
r("dirfd", "sub2", "sub3", 0, fd, fd)
r("absolute", os.path.abspath("abs"), os.path.abspath("dst/abs"))
r("through_symlink", "lnk/deep", "deep2")
r("self", "same", "same")
r("dot", "proj/.", "dot2")
`

// dirRenameModesScript renames dirs whose modes keep an unprivileged
// caller out (the renamer must give the same errnos, and open up a 0555 dir
// it owns to move it by hand), then lists the tree as treeState does.
const dirRenameModesScript = `
import ctypes, errno, os, stat
libc = ctypes.CDLL(None, use_errno=True)
def r(name, a, b):
    if libc.renameat2(-100, a.encode(), -100, b.encode(), 0) == 0:
        print(name + ": ok")
    else:
        print(name + ": " + errno.errorcode[ctypes.get_errno()])
r("ro_parent", "ro/d", "d_from_ro")
r("ro_dir_across", "rodir", "dst/rodir")
r("ro_dir_same_parent", "rodir_b", "rodir_b2")
r("ro_inside", "tree", "tree2")
for root, dirs, files in sorted(os.walk(".")):
    for n in sorted(dirs + files):
        p = os.path.join(root, n)
        st = os.lstat(p)
        isdir = stat.S_ISDIR(st.st_mode)
        changing = p in ("./dst", "./ro")
        print(p, oct(st.st_mode), "" if isdir else st.st_nlink, "" if changing else st.st_mtime_ns)
`

const dirRenameModesWant = `ro_parent: %[1]s
ro_dir_across: %[1]s
ro_dir_same_parent: ok
ro_inside: ok
`

const dirRenameWant = `plain: ok
across: ok
onto_empty: ok
onto_nonempty: ENOTEMPTY
into_itself: EINVAL
dir_over_file: ENOTDIR
file_over_dir: EISDIR
noreplace: EEXIST
noreplace_new: ok
trailing_slash: ok
file_trailing_slash: ENOTDIR
missing: ENOENT
dirfd: ok
absolute: ok
through_symlink: ok
self: ok
dot: EBUSY
`

// dirRenameTree makes the tree the script works on: nested files, hard
// links within the moved tree, a symlink, odd modes (a 0750 dir, a 0600
// file), all with one fixed mtime.
func dirRenameTree(t *testing.T, root string) {
	t.Helper()
	makeTree(t, root, map[string]string{
		"top.txt": "top\n", "proj/build/b.o": "b\n", "proj/src/s.py": "s\n", "proj/src/sub/x": "x\n",
		"proj/src/secret.txt": "mine\n", "proj/src/sub/deeper/r": "r\n", "proj/lib/l.so": "l\n",
		"proj/doc/d.md": "d\n", "proj/sub2/f": "f\n", "dst/full/f": "f\n", "dst/file": "file\n",
		"keep/k": "k\n", "abs/a": "a\n", "real/deep/z": "z\n", "same/s": "s\n",
	}, map[string]os.FileMode{"proj/src/sub": 0o750}, func() {
		for _, d := range []string{"dst/empty", "proj/doc/inner"} {
			if err := os.Mkdir(filepath.Join(root, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		must := func(err error) {
			t.Helper()
			if err != nil {
				t.Fatal(err)
			}
		}
		must(os.Link(filepath.Join(root, "proj/src/sub/x"), filepath.Join(root, "proj/src/sub/x2")))
		must(os.Link(filepath.Join(root, "proj/src/sub/x"), filepath.Join(root, "proj/src/x3")))
		must(os.Symlink("../top.txt", filepath.Join(root, "proj/src/l")))
		must(os.Symlink("real", filepath.Join(root, "lnk")))
		must(os.Chmod(filepath.Join(root, "proj/src/secret.txt"), 0o600))
	})
}

// makeTree writes files beneath root, runs extra, sets one fixed mtime on
// everything (bottom-up) and then the modes.
func makeTree(t *testing.T, root string, files map[string]string, modes map[string]os.FileMode, extra func()) {
	t.Helper()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	extra()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	mtime := time.Unix(981173106, 123456789)
	// Bottom-up, so that each dir's time is set after its entries.
	var all []string
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		all = append(all, p)
		return err
	})
	sort.Sort(sort.Reverse(sort.StringSlice(all)))
	for _, p := range all {
		if fi, _ := os.Lstat(p); fi.Mode()&fs.ModeSymlink == 0 {
			must(os.Chtimes(p, mtime, mtime))
		}
	}
	for p, m := range modes {
		must(os.Chmod(filepath.Join(root, p), m))
	}
}

// treeState describes every path beneath root: type, mode, owner, content
// or target, which paths are one inode, and the mtime of every file and of
// every dir whose entries the script does not change.
func treeState(t *testing.T, root string) string {
	t.Helper()
	// dst/empty is replaced by a moved dir with an older mtime: a dir that
	// exists before and after with the same mode is not in the delta (a
	// change of mtime alone is not a change in the contract), so commit
	// leaves its host mtime, root and rootless alike.
	changing := map[string]bool{".": true, "proj": true, "dst": true, "real": true, "dst/empty": true}
	var lines []string
	inodes := map[uint64][]string{}
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Errorf("walking %s: %v", p, err)
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		fi, err := os.Lstat(p)
		if err != nil {
			t.Errorf("%s: %v", p, err)
			return nil
		}
		st := fi.Sys().(*syscall.Stat_t)
		line := fmt.Sprintf("%s %v %d:%d", rel, fi.Mode(), st.Uid, st.Gid)
		switch {
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			line += fmt.Sprintf(" %q nlink=%d", b, st.Nlink)
			inodes[st.Ino] = append(inodes[st.Ino], rel)
		case fi.Mode()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			line += " -> " + l
		}
		if fi.Mode()&fs.ModeSymlink == 0 && !(fi.IsDir() && changing[rel]) {
			line += " mtime=" + fi.ModTime().UTC().Format(time.RFC3339Nano)
		}
		lines = append(lines, line)
		return nil
	})
	for _, names := range inodes {
		if len(names) > 1 {
			sort.Strings(names)
			lines = append(lines, "linked "+strings.Join(names, " "))
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

// TestTrialDirRename: rename(2) of host dirs in a trial has the native
// outcome: the same result (or errno) for every call, and, once the trial is
// committed, the same tree as the native run's twin, hard links, modes and
// mtimes included. As root the overlays' redirect_dir=on does it; rootless
// the supervisor's renamer (before it, every host dir rename failed there
// with EXDEV). TestTrialDirRenameRootless runs it as nobody.
func TestTrialDirRename(t *testing.T) {
	requireNS(t)
	testreq.NeedPython(t)
	native, trial := t.TempDir(), t.TempDir()
	dirRenameTree(t, native)
	dirRenameTree(t, trial)
	if a, b := treeState(t, native), treeState(t, trial); a != b {
		t.Fatalf("the twins differ before the run:\n%s\n\n%s", a, b)
	}
	cmd := exec.Command("/usr/bin/python3", "-c", dirRenameScript)
	cmd.Dir = native
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("native run: %v\n%s", err, out)
	}
	if string(out) != dirRenameWant {
		t.Fatalf("native run:\n%s\nwant:\n%s", out, dirRenameWant)
	}
	sink := &memSink{}
	d := runTrial(t, trial, dryexec.TrialSpec{Blobs: sink}, "/usr/bin/python3", "-c", dirRenameScript)
	if d.Process.Stdout != string(out) || d.Process.ExitCode != 0 {
		t.Fatalf("in the trial (exit %d):\n%s%s\nnatively:\n%s", d.Process.ExitCode, d.Process.Stdout, d.Process.Stderr, out)
	}
	byOp := map[string]dryexec.Op{}
	for _, f := range d.Files {
		rel, _ := filepath.Rel(trial, f.Path)
		byOp[rel] = f.Op
	}
	for rel, op := range map[string]dryexec.Op{"proj/build/b.o": dryexec.OpDelete, "proj/build": dryexec.OpRmdir,
		"proj/build.old": dryexec.OpMkdir, "proj/build.old/b.o": dryexec.OpCreate, "dst/src/sub/x2": dryexec.OpCreate,
		"proj/src/sub/deeper/r": dryexec.OpDelete, "dst/src/sub/deeper/r": dryexec.OpCreate} {
		if byOp[rel] != op {
			t.Errorf("%s: %q in the delta, want %q", rel, byOp[rel], op)
		}
	}
	blobs := func(sha string) (io.ReadCloser, error) {
		b, ok := sink.blobs[sha]
		if !ok {
			return nil, fmt.Errorf("no blob %s", sha)
		}
		return io.NopCloser(bytes.NewReader(b)), nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := commit.Apply(ctx, d, commit.Options{OpenBlob: blobs, JournalDir: t.TempDir()}); err != nil {
		t.Fatalf("commit: %v", err)
	}
	if a, b := treeState(t, native), treeState(t, trial); a != b {
		t.Errorf("the committed tree differs from the native one:\n%s", lineDiff(a, b))
	}
}

func who() string {
	if os.Getuid() == 0 {
		return "root"
	}
	return "rootless"
}

// lineDiff lists the lines only in a (-) or only in b (+).
func lineDiff(a, b string) string {
	in := func(s string) map[string]bool {
		m := map[string]bool{}
		for _, l := range strings.Split(s, "\n") {
			m[l] = true
		}
		return m
	}
	ma, mb := in(a), in(b)
	var out []string
	for l := range ma {
		if !mb[l] {
			out = append(out, "- "+l)
		}
	}
	for l := range mb {
		if !ma[l] {
			out = append(out, "+ "+l)
		}
	}
	sort.Strings(out)
	return strings.Join(out, "\n")
}

// TestTrialDirRenameModes: dirs whose modes keep an unprivileged caller out
// give the native errno (EACCES for a dir moved out of a 0555 parent, or a
// 0555 dir moved to another parent, which must be written to update its
// ".."), and a 0555 dir the caller owns, and one inside a moved tree, move
// with their modes and mtimes. The tree is compared inside the trial: a
// rootless commit cannot delete the files of a 0555 dir (commit replays a
// dir's move as its files' deletes and creates), so it is not committed.
func TestTrialDirRenameModes(t *testing.T) {
	requireNS(t)
	testreq.NeedPython(t)
	mk := func(root string) {
		makeTree(t, root, map[string]string{"ro/d/f": "f\n", "rodir/f": "f\n", "rodir_b/f": "f\n", "dst/g": "g\n",
			"tree/ro/r": "r\n", "tree/t": "t\n"},
			map[string]os.FileMode{"ro": 0o555, "rodir": 0o555, "rodir_b": 0o555, "tree/ro": 0o555, "tree": 0o700}, func() {})
		t.Cleanup(func() {
			filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error { os.Chmod(p, 0o755); return nil })
		})
	}
	native, trial := t.TempDir(), t.TempDir()
	mk(native)
	mk(trial)
	cmd := exec.Command("/usr/bin/python3", "-c", dirRenameModesScript)
	cmd.Dir = native
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("native run: %v\n%s", err, out)
	}
	denied := "EACCES"
	if os.Getuid() == 0 {
		denied = "ok"
	}
	if want := fmt.Sprintf(dirRenameModesWant, denied); !strings.HasPrefix(string(out), want) {
		t.Fatalf("native run:\n%s\nwant:\n%s", out, want)
	}
	d := runTrial(t, trial, dryexec.TrialSpec{}, "/usr/bin/python3", "-c", dirRenameModesScript)
	if d.Process.Stdout != string(out) || d.Process.ExitCode != 0 {
		t.Fatalf("in the trial (exit %d):\n%s\n%s", d.Process.ExitCode, lineDiff(string(out), d.Process.Stdout), d.Process.Stderr)
	}
}

// renameEscapeScript tries to move masked and protected things with
// rename(2), through paths the supervisor's renamer resolves differently
// from the caller (magic links), and races a symlink swap against it.
const renameEscapeScript = `
import ctypes, errno, os, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
def call(a, b):
    if libc.renameat2(-100, a.encode(), -100, b.encode(), 0) == 0:
        return "ok"
    return errno.errorcode[ctypes.get_errno()]
def r(name, a, b):
    print(name + ": " + call(a, b))
fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
r("mask_itself", "proj/keys", "k2")
r("mask_subdir", "proj/keys/sub", "k3")
r("into_mask", "d", "proj/keys/d")
r("out_of_sys", "/sys/kernel", "k")
r("into_sys", "d", "/sys/d")
r("own_state", sys.argv[1], "st2")
r("own_state_parent", os.path.dirname(sys.argv[1]), "st3")
r("guest_cwd", "/proc/1/cwd/x", "x3")
r("guest_root", "/proc/1/root/" + os.getcwd() + "/x", "x4")
r("proc_self_fd", "/proc/self/fd/%d/x" % fd, "x2")
if sys.argv[2] == "rootless":
    r("mask_parent", "proj", "proj2")
# The race: sw flips between a dir of ours and a symlink to the mask (and
# to /proc/self/cwd, which is the guest's cwd for the supervisor) while
# its subdir is renamed back and forth.
stop = False
def flip():
    targets = ["proj/keys", "/proc/self/cwd", "/proc/1/cwd"]
    i = 0
    while not stop:
        os.rename("sw", "swdir")
        os.symlink(targets[i % 3], "sw")
        os.unlink("sw")
        os.rename("swdir", "sw")
        i += 1
t = threading.Thread(target=flip)
t.start()
seen = set()
for _ in range(400):
    res = call("sw/sub", "sw/sub2")
    seen.add(res)
    if res == "ok":
        call("sw/sub2", "sw/sub")
stop = True
t.join()
print("race: done")
print("mask:", sorted(os.listdir("proj/keys")), repr(open("proj/keys/id").read()))
`

// TestTrialDirRenameEscapes: renames that would move a masked path or
// dryexec's own state out of its mask, reach a read-only mount, or go
// through a magic link (which the supervisor must not follow: its
// /proc/self is the guest) fail exactly as they did before the renamer
// (rootless: the overlay's EXDEV, or the kernel's own refusal), a symlink
// swapped under the renamer gains nothing, and no secret reaches the output
// or the delta. The host is untouched.
func TestTrialDirRenameEscapes(t *testing.T) {
	requireNS(t)
	testreq.NeedPython(t)
	tree, state := t.TempDir(), t.TempDir()
	makeTree(t, tree, map[string]string{"proj/keys/id": "SECRET", "proj/keys/sub/k": "SECRET", "proj/a": "a\n",
		"d/f": "f\n", "x/f": "f\n", "sw/sub/f": "f\n"}, nil, func() {})
	own := filepath.Join(state, "daemon-home")
	if err := os.MkdirAll(filepath.Join(own, "trials"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(own, "token"), []byte("SECRET"), 0o600); err != nil {
		t.Fatal(err)
	}
	before, beforeState := snapshot(t, tree), snapshot(t, state)
	sink := &memSink{}
	d := runTrial(t, tree, dryexec.TrialSpec{Blobs: sink, Masks: []string{filepath.Join(tree, "proj/keys")}, OwnPaths: []string{own}},
		"/usr/bin/python3", "-c", renameEscapeScript, filepath.Join(own, "trials"), who())
	// Rootless the renamer refuses a tree with a mount in it (the mask),
	// with the overlay's EXDEV. As root (not tried here) the overlay renames
	// proj with the mask inside, the mount moving with its dir, and the
	// delta then holds the host's masked file under the new name (the
	// Differ reads a renamed dir's host tree): see docs/limits.md.
	maskParent, selfFD, ownState := "mask_parent: EXDEV\n", "EXDEV", "EACCES"
	if os.Getuid() == 0 {
		maskParent, selfFD, ownState = "", "ok", "ENOENT"
	}
	want := `mask_itself: EBUSY
mask_subdir: EXDEV
into_mask: EXDEV
out_of_sys: EXDEV
into_sys: EXDEV
own_state: ` + ownState + `
own_state_parent: EBUSY
guest_cwd: EACCES
guest_root: EACCES
proc_self_fd: ` + selfFD + `
` + maskParent + `race: done
mask: ['id', 'sub'] ''
`
	if os.Getuid() == 0 {
		// As root the renamer is not there (the overlays have
		// redirect_dir=on): only what must hold whatever the kernel says.
		for _, l := range strings.Split(d.Process.Stdout, "\n") {
			name, res, _ := strings.Cut(l, ": ")
			if res == "ok" && name != "proc_self_fd" && name != "race" {
				t.Errorf("%s succeeded", name)
			}
		}
		if !strings.HasSuffix(d.Process.Stdout, "mask: ['id', 'sub'] ''\n") {
			t.Errorf("stdout %s\nstderr %s", d.Process.Stdout, d.Process.Stderr)
		}
	} else if d.Process.Stdout != want {
		t.Errorf("stdout:\n%s\nwant:\n%s\nstderr %s", d.Process.Stdout, want, d.Process.Stderr)
	}
	for sha, b := range sink.blobs {
		if bytes.Contains(b, []byte("SECRET")) {
			t.Errorf("a secret is in the delta's content %s", sha)
		}
	}
	for _, f := range d.Files {
		if !strings.HasPrefix(f.Path, tree+"/") {
			t.Errorf("a change outside the tree: %s %s", f.Op, f.Path)
		}
	}
	sameSnapshot(t, before, snapshot(t, tree))
	sameSnapshot(t, beforeState, snapshot(t, state))
}
