package escape

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/rootless"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/rung/linuxns"
)

// sameInode fails a script unless its two paths are one file (hard links).
// Over the host's files (LOWER set) it compares contents only: overlayfs
// without xino reports a new hard link to a host file with another st_ino
// than the file's (the copied-up file keeps the host's inode number, the link
// shows the upper one), which is the overlay's matter, not Landlock's.
const sameInode = `same() {
	if [ -n "$LOWER" ]; then cmp -s "$1" "$2" || { echo "differ: $1 $2"; exit 1; }; return; fi
	[ "$(stat -c %i "$1")" = "$(stat -c %i "$2")" ] || { echo "not linked: $1 $2"; exit 1; }
}
`

// gitRepo makes repo/ with a/x committed.
const gitRepo = `git init -q repo && mkdir repo/a repo/b && echo x > repo/a/x &&
git -C repo add . && git -C repo -c user.name=t -c user.email=t@t commit -qm init
`

// moveCases are real programs that rename or link files between
// directories. Each runs twice in a trial: over files its fixture made on the
// host before the trial (the overlay's lower layer), and over files the
// trial made itself (the fixture runs first, in the trial).
var moveCases = []struct {
	name    string
	needs   string // the program the case runs
	fixture string // sh, in the trial's directory
	script  string // sh, in the trial's directory
	want    []string
	// moved are fixture paths the script moves away: deleted in the delta
	// when they were the host's, absent from it when the trial made them.
	moved []string
	// createdOnly: rootless, the case runs only over files the trial made,
	// and why (as root it runs over the host's files too).
	createdOnly string
}{
	{name: "python os.rename", needs: "python3", fixture: "mkdir -p a b && echo x > a/x",
		script: `python3 -c 'import os; os.rename("a/x", "b/x")'`, want: []string{"b/x"}, moved: []string{"a/x"}},
	{name: "python os.link", needs: "python3", fixture: "mkdir -p a b && echo x > a/x",
		script: sameInode + `python3 -c 'import os; os.link("a/x", "b/y")' && same a/x b/y`, want: []string{"b/y"}},
	{name: "node fs.renameSync", needs: "node", fixture: "mkdir -p a b && echo x > a/x",
		script: `node -e 'require("fs").renameSync("a/x", "b/x")'`, want: []string{"b/x"}, moved: []string{"a/x"}},
	{name: "tar with hard links", needs: "tar",
		fixture: "mkdir -p src/d1 src/d2 && echo h > src/d1/f && ln src/d1/f src/d2/g && tar cf t.tar src",
		script:  sameInode + "mkdir out && tar xf t.tar -C out && same out/src/d1/f out/src/d2/g",
		want:    []string{"out/src/d1/f", "out/src/d2/g"}},
	{name: "rsync -H", needs: "rsync", fixture: "mkdir -p src/d1 src/d2 && echo h > src/d1/f && ln src/d1/f src/d2/g",
		script: sameInode + "rsync -aH src/ dst/ && same dst/d1/f dst/d2/g", want: []string{"dst/d1/f", "dst/d2/g"}},
	{name: "git mv", needs: "git", fixture: gitRepo,
		script: "cd repo && git mv a/x b/x && git status --short | grep -q '^R  a/x -> b/x'",
		want:   []string{"repo/b/x"}, moved: []string{"repo/a/x"}},
	{name: "local git clone", needs: "git", fixture: gitRepo,
		script:      "git clone -q --local repo clone && git -C clone log --oneline | grep -q init && cat clone/a/x",
		want:        []string{"clone/a/x", "clone/.git/HEAD"},
		createdOnly: "git checks each hard link's st_ino against the source's, and in a user namespace overlayfs reports a new link to a host file with another inode number than the file (\"hardlink different from source\"), even with xino"},
	{name: "mv of a directory holding hard links", needs: "mv",
		fixture: "mkdir -p d/in e && echo h > d/in/f && ln d/in/f d/in/g",
		script:  sameInode + "mv d/in e/in && same e/in/f e/in/g", want: []string{"e/in/f", "e/in/g"}, moved: []string{"d/in/f", "d/in/g"},
		createdOnly: "renaming a directory of the host's needs overlayfs's redirect_dir, which a user namespace refuses"},
}

// TestCrossDirectoryMoves: rename and link between directories work in a
// trial, for programs that call rename(2) and link(2) directly (before the
// Landlock ruleset granted REFER, each failed with EXDEV), over the host's
// files and the trial's own, and the delta holds what they made.
func TestCrossDirectoryMoves(t *testing.T) {
	nsAvailable(t)
	for _, tc := range moveCases {
		for _, lower := range []bool{true, false} {
			name := tc.name + "/created"
			if lower {
				name = tc.name + "/lower"
			}
			t.Run(name, func(t *testing.T) {
				if lower && tc.createdOnly != "" && os.Geteuid() != 0 {
					testreq.Needf(t, testreq.Root, tc.createdOnly, testreq.ErrNotRoot)
				}
				if _, err := exec.LookPath(tc.needs); err != nil {
					t.Fatalf("%s is not installed (make deps installs it): %v", tc.needs, err)
				}
				dir := t.TempDir()
				script := tc.fixture + "\n" + tc.script
				if lower {
					fix := exec.Command("/bin/sh", "-c", tc.fixture)
					fix.Dir = dir
					if out, err := fix.CombinedOutput(); err != nil {
						t.Fatalf("fixture: %v\n%s", err, out)
					}
					script = "LOWER=1\n" + tc.script
				}
				d := trialIn(t, dir, script)
				if d.Process.ExitCode != 0 {
					t.Fatalf("exit %d\n%s%s", d.Process.ExitCode, d.Process.Stdout, d.Process.Stderr)
				}
				byPath := map[string]dryexec.FileChange{}
				for _, c := range d.Files {
					byPath[c.Path] = c
				}
				for _, rel := range tc.want {
					if c, ok := byPath[filepath.Join(dir, rel)]; !ok || (c.Op != dryexec.OpCreate && c.Op != dryexec.OpModify) {
						t.Errorf("%s: %+v, want it created", rel, c)
					}
				}
				for _, rel := range tc.moved {
					c, ok := byPath[filepath.Join(dir, rel)]
					switch {
					case lower && (!ok || c.Op != dryexec.OpDelete):
						t.Errorf("%s: %+v, want it deleted", rel, c)
					case !lower && ok:
						t.Errorf("%s: %+v, want nothing (the trial made and moved it)", rel, c)
					}
				}
				if t.Failed() {
					var paths []string
					for _, c := range d.Files {
						paths = append(paths, string(c.Op)+" "+c.Path)
					}
					t.Logf("delta:\n%s", strings.Join(paths, "\n"))
				}
			})
		}
	}
}

// TestDeviceNodesStillRefused: granting REFER did not open mknod: character
// and block devices stay refused (a FIFO is fine), from mknod(1) and from
// mknod(2), and none reaches the delta.
func TestDeviceNodesStillRefused(t *testing.T) {
	nsAvailable(t)
	dir := t.TempDir()
	d := trialIn(t, dir, `mknod c1 c 1 3 2>/dev/null && echo made-c1
mknod b1 b 7 0 2>/dev/null && echo made-b1
python3 -c 'import os, stat
for name, kind in (("c2", stat.S_IFCHR), ("b2", stat.S_IFBLK)):
    try:
        os.mknod(name, kind | 0o600, os.makedev(1, 5)); print("made-" + name)
    except OSError as e:
        print("refused", name, e.errno)'
mkdir sub && mknod sub/c3 c 1 3 2>/dev/null && echo made-c3
mkfifo p && echo made-fifo`)
	out := d.Process.Stdout
	if strings.Contains(out, "made-c") || strings.Contains(out, "made-b") || !strings.Contains(out, "made-fifo") {
		t.Errorf("device nodes: %q", out)
	}
	for _, c := range d.Files {
		if c.Kind == dryexec.KindFIFO {
			continue
		}
		if base := filepath.Base(c.Path); slices.Contains([]string{"c1", "b1", "c2", "b2", "c3"}, base) {
			t.Errorf("a device node reached the delta: %+v", c)
		}
	}
}

// trialIn runs script with /bin/sh in dir in an ns trial.
func trialIn(t *testing.T, dir, script string) *dryexec.StateDelta {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	home := os.Getenv("HOME")
	d, err := (&linuxns.Rung{}).Trial(ctx, dryexec.TrialSpec{Action: dryexec.Action{
		Argv: []string{"/bin/sh", "-c", script}, Cwd: dir, TimeoutMS: 90_000,
		Env: map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin", "HOME": home},
	}})
	if err != nil {
		t.Fatalf("trial: %v", err)
	}
	validate(t, d)
	return d
}

// TestMovesRootless re-runs the move and device tests as an unprivileged
// user.
func TestMovesRootless(t *testing.T) {
	pass, _ := rootless.Rerun(t, "^(TestCrossDirectoryMoves|TestDeviceNodesStillRefused)$", 10*time.Minute)
	if pass < len(moveCases) {
		t.Errorf("the rootless re-run passed %d cases, want at least %d", pass, len(moveCases))
	}
}
