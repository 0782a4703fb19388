package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec/internal/testreq"
)

// manifest describes a tree the same way inside a trial and on the host: every
// path with its type, mode, size and content hash or link target.
const manifest = `find . -mindepth 1 ! -name '.dryexec-*' -printf '%y %m %p %l\n' | sort; find . -type f -exec sha256sum {} + | sort -k2`

// roundTripScript makes every kind of change.
const roundTripScript = `set -e
echo new > created.txt
printf 'line1\nline2 changed\n' > modified.txt
rm deleted.txt
chmod 600 chmodded.txt
mkdir -p newdir/sub && echo deep > newdir/sub/deep.txt && chmod 750 newdir
rm -r oldtree
ln -s created.txt link
rm replaced && mkdir replaced && echo inside > replaced/f
rm -r dir2file && echo nowfile > dir2file
ln -sf modified.txt relinked
cp /bin/true exe && chmod 4755 exe
printf '\x00\x01binary' > bin.dat
rmdir emptydir
mkdir newempty
`

func makeRoundTripTree(t *testing.T, dir string) {
	t.Helper()
	files := map[string]string{
		"modified.txt": "line1\nline2\n", "deleted.txt": "bye\n", "chmodded.txt": "c\n",
		"oldtree/a": "a\n", "oldtree/b/c": "c\n", "replaced": "was a file\n", "dir2file/x": "x\n",
		"keep.txt": "untouched\n",
	}
	for name, c := range files {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.Mkdir(filepath.Join(dir, "emptydir"), 0o755)
	os.Symlink("keep.txt", filepath.Join(dir, "relinked"))
}

func hostManifest(t *testing.T, dir string) string {
	t.Helper()
	c := exec.Command("sh", "-c", manifest)
	c.Dir = dir
	out, err := c.Output()
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

// TestCommitRoundTrip: after commit, the host tree is byte-for-byte and
// mode-for-mode what the sandbox saw at the end of the trial.
func TestCommitRoundTrip(t *testing.T) {
	requireNS(t)
	dir, home := t.TempDir(), t.TempDir()
	makeRoundTripTree(t, dir)
	before := hostManifest(t, dir)
	code, out, errs := cli(t, home, "run", "--json", "-C", dir, "--", "sh", "-c", roundTripScript+manifest)
	if code != 0 && code != ExitReview { // it deletes: review
		t.Fatalf("run: %d %s", code, errs)
	}
	d := decode(t, out)
	seen := map[string]bool{}
	for _, f := range d.Files {
		seen[string(f.Op)] = true
	}
	for _, op := range []string{"create", "modify", "delete", "chmod", "mkdir", "rmdir", "symlink"} {
		if !seen[op] {
			t.Errorf("the trial has no %s", op)
		}
	}
	if got := hostManifest(t, dir); got != before {
		t.Fatal("run changed the host")
	}
	if code, _, errs := cli(t, home, "commit", d.TrialID); code != 0 {
		t.Fatalf("commit: %d %s", code, errs)
	}
	if got := hostManifest(t, dir); got != d.Process.Stdout {
		t.Fatalf("host after commit differs from the sandbox's view:\nhost:\n%s\nsandbox:\n%s", got, d.Process.Stdout)
	}
	if code, _, errs := cli(t, home, "commit", d.TrialID); code != ExitRefused || !strings.Contains(errs, "already committed") {
		t.Errorf("second commit: %d %q", code, errs)
	}
}

func TestSelectiveCommit(t *testing.T) {
	requireNS(t)
	dir, home := t.TempDir(), t.TempDir()
	code, out, errs := cli(t, home, "run", "--json", "-C", dir, "--", "sh", "-c", "for i in 1 2 3 4 5; do echo $i > f$i; done")
	if code != 0 {
		t.Fatalf("run: %d %s", code, errs)
	}
	d := decode(t, out)
	if code, _, errs := cli(t, home, "commit", d.TrialID, filepath.Join(dir, "f3")); code != 0 {
		t.Fatalf("commit: %d %s", code, errs)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 1 || ents[0].Name() != "f3" {
		t.Fatalf("host has %v, want only f3", ents)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "f3")); string(b) != "3\n" {
		t.Fatalf("f3 = %q", b)
	}
	// The rest stays to commit or discard, and ls, show and commit say so.
	steps := []struct {
		args   []string
		code   int
		onHost int
		show   string // in show's status, or ls's line
	}{
		{[]string{"show", d.TrialID}, 0, 1, "status: partly committed "},
		{[]string{"show", d.TrialID}, 0, 1, "4 changes left (dryexec commit " + d.TrialID},
		{[]string{"ls"}, 0, 1, "partly committed (4 left)"},
		{[]string{"commit", d.TrialID, filepath.Join(dir, "f3")}, ExitRefused, 1, ""},
		{[]string{"commit", d.TrialID, filepath.Join(dir, "f1")}, 0, 2, "3 left to commit or discard"},
		{[]string{"commit", d.TrialID, filepath.Join(dir, "f2"), filepath.Join(dir, "f4")}, 0, 4, "1 left"},
		{[]string{"discard", d.TrialID}, 0, 4, ""},
		{[]string{"show", d.TrialID}, 0, 4, "partly committed (only " + filepath.Join(dir, "f3")},
		{[]string{"show", d.TrialID}, 0, 4, "the rest discarded"},
		{[]string{"commit", d.TrialID}, ExitRefused, 4, ""},
	}
	for i, st := range steps {
		code, out, errs := cli(t, home, st.args...)
		ents, _ := os.ReadDir(dir)
		if code != st.code || len(ents) != st.onHost || !strings.Contains(out, st.show) {
			t.Fatalf("step %d %v: exit %d, %d files on the host, want %d, %d, %q in\n%s%s", i, st.args, code, len(ents), st.code, st.onHost, st.show, out, errs)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "f5")); err == nil {
		t.Error("the discarded rest reached the host")
	}
}

func TestCommitConflictLeavesHost(t *testing.T) {
	requireNS(t)
	dir, home := t.TempDir(), t.TempDir()
	os.WriteFile(filepath.Join(dir, "a"), []byte("one\n"), 0o644)
	code, out, _ := cli(t, home, "run", "--json", "-C", dir, "--", "sh", "-c", "echo two > a; echo b > b")
	if code != 0 {
		t.Fatal("run failed")
	}
	d := decode(t, out)
	os.WriteFile(filepath.Join(dir, "a"), []byte("edited on the host\n"), 0o644)
	code, _, errs := cli(t, home, "commit", d.TrialID)
	if code != ExitRefused || !strings.Contains(errs, "commit conflict") || !strings.Contains(errs, filepath.Join(dir, "a")) {
		t.Fatalf("commit over an edited file: %d %q", code, errs)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a")); string(b) != "edited on the host\n" {
		t.Fatalf("a = %q", b)
	}
	if _, err := os.Stat(filepath.Join(dir, "b")); err == nil {
		t.Fatal("a refused commit still created b")
	}
	// --force-path overrides only where it is told to.
	if code, _, errs := cli(t, home, "commit", "--force-path", filepath.Join(dir, "a"), d.TrialID); code != 0 {
		t.Fatalf("forced commit: %d %s", code, errs)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "a")); string(b) != "two\n" {
		t.Fatalf("a = %q after forced commit", b)
	}
}

func TestCommitRefusesSymlinkedParent(t *testing.T) {
	requireNS(t)
	dir, home, elsewhere := t.TempDir(), t.TempDir(), t.TempDir()
	os.Mkdir(filepath.Join(dir, "sub"), 0o755)
	code, out, _ := cli(t, home, "run", "--json", "-C", dir, "--", "sh", "-c", "echo x > sub/f")
	if code != 0 {
		t.Fatal("run failed")
	}
	d := decode(t, out)
	// After the trial, sub becomes a symlink to a directory elsewhere.
	os.Remove(filepath.Join(dir, "sub"))
	if err := os.Symlink(elsewhere, filepath.Join(dir, "sub")); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"commit", d.TrialID}, {"commit", "--force", d.TrialID}} {
		code, _, errs := cli(t, home, args...)
		if code != ExitRefused || !strings.Contains(errs, "unsafe host path") {
			t.Fatalf("%v: %d %q", args, code, errs)
		}
		if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
			t.Fatalf("commit wrote through the symlink: %v", ents)
		}
	}
}

func TestTrialsExpire(t *testing.T) {
	requireNS(t)
	dir, home := t.TempDir(), t.TempDir()
	code, out, _ := cli(t, home, "run", "--json", "-C", dir, "--", "sh", "-c", "echo x > f")
	if code != 0 {
		t.Fatal("run failed")
	}
	d := decode(t, out)
	old := time.Now().Add(-48 * time.Hour)
	os.Chtimes(filepath.Join(home, "trials", d.TrialID, "delta.json"), old, old)
	code, _, errs := cli(t, home, "commit", d.TrialID)
	if code != ExitRefused || !strings.Contains(errs, "trial not found") {
		t.Fatalf("commit of an expired trial: %d %q", code, errs)
	}
	if _, err := os.Stat(filepath.Join(home, "trials", d.TrialID)); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("expired trial not cleaned")
	}
}

// TestCommitSurvivesSIGKILL kills a real dryexec process at every point of a
// commit, runs the next command, and checks the host is entirely old or entirely
// new, with no temp or backup files left.
func TestCommitSurvivesSIGKILL(t *testing.T) {
	testreq.NeedTestHooks(t)
	requireNS(t)
	dir, home := t.TempDir(), t.TempDir()
	makeRoundTripTree(t, dir)
	old := hostManifest(t, dir)
	runs, completed, rolledForward := 0, 0, 0
	var newM string
	at := 1
	// Each round kills the commit at successive points until one survives or a
	// kill lands after the point of no return (rolled forward); the next round
	// goes on from the next point. After a complete pass, go again until ≥ 60
	// processes have been killed or completed.
	for round := 0; runs < 60 || completed == 0; round++ {
		// A fresh trial each round (a trial commits once), on the old tree.
		code, out, errs := cli(t, home, "run", "--json", "-C", dir, "--", "sh", "-c", roundTripScript+manifest)
		if code != 0 && code != ExitReview { // it deletes: review
			t.Fatalf("run: %d %s", code, errs)
		}
		d := decode(t, out)
		newM = d.Process.Stdout
		for ; ; at++ {
			c := exec.Command("/proc/self/exe", "commit", d.TrialID)
			c.Env = []string{"DRYEXEC_TEST_AS_CLI=1", "DRYEXEC_HOME=" + home, "PATH=/usr/bin:/bin",
				fmt.Sprintf("DRYEXEC_TEST_CRASH_AT=%d", at)}
			exe, _ := os.Executable()
			c.Path = exe
			outb, err := c.CombinedOutput()
			runs++
			killed := err != nil && strings.Contains(err.Error(), "killed")
			// The next command recovers.
			if code, _, errs := cli(t, home, "ls"); code != 0 {
				t.Fatalf("ls after crash at %d: %d %s", at, code, errs)
			}
			got := hostManifest(t, dir)
			if got != old && got != newM {
				t.Fatalf("crash at point %d left a mixed tree:\n%s\nold:\n%s\nnew:\n%s", at, got, old, newM)
			}
			if leftovers := dryexecFiles(t, dir); len(leftovers) > 0 {
				t.Fatalf("crash at point %d left %v", at, leftovers)
			}
			if !killed {
				if err != nil {
					t.Fatalf("commit at %d: %v %s", at, err, outb)
				}
				completed++
				at = 1
				break
			}
			if got == newM {
				// Rolled forward: this trial is committed; start a new round from
				// the old tree.
				rolledForward++
				at++
				break
			}
		}
		// Back to the old tree for the next round.
		os.RemoveAll(dir)
		os.Mkdir(dir, 0o755)
		makeRoundTripTree(t, dir)
		if hostManifest(t, dir) != old {
			t.Fatal("could not rebuild the old tree")
		}
		if round > 40 {
			t.Fatalf("no progress after %d rounds", round)
		}
	}
	if rolledForward == 0 {
		t.Fatal("no kill landed after the point of no return")
	}
	t.Logf("%d commit processes, %d killed and recovered (%d rolled forward), %d completed", runs, runs-completed, rolledForward, completed)
}

func dryexecFiles(t *testing.T, dir string) []string {
	var out []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(d.Name(), ".dryexec-") {
			out = append(out, p)
		}
		return nil
	})
	sort.Strings(out)
	return out
}

func TestRunCommitAndInteractive(t *testing.T) {
	requireNS(t)
	home := t.TempDir()
	run := func(stdin string, args ...string) (int, string, string) {
		var out, errb strings.Builder
		env := map[string]string{"DRYEXEC_HOME": home, "PATH": "/usr/bin:/bin"}
		code := Run(t.Context(), args, Env{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb,
			Getenv: func(k string) string { return env[k] }})
		return code, out.String(), errb.String()
	}
	block := filepath.Join(t.TempDir(), "block.json")
	os.WriteFile(block, []byte(`{"rules": [{"name": "no", "expr": "true", "result": "block", "reason": "never"}]}`), 0o644)
	tests := []struct {
		name  string
		stdin string
		args  []string
		want  []string // files on the host afterwards
	}{
		{"--commit applies", "", []string{"run", "--commit", "--", "sh", "-c", "echo a > a; echo b > b"}, []string{"a", "b"}},
		{"--commit refuses a failed command", "", []string{"run", "--commit", "--", "sh", "-c", "echo a > a; exit 1"}, nil},
		{"--commit --force applies a failed command", "", []string{"run", "--commit", "--force", "--", "sh", "-c", "echo a > a; exit 1"}, []string{"a"}},
		{"-i yes", "y\n", []string{"run", "-i", "--", "sh", "-c", "echo a > a; echo b > b"}, []string{"a", "b"}},
		{"-i no", "n\n", []string{"run", "-i", "--", "sh", "-c", "echo a > a"}, nil},
		{"-i no says the trial is left pending", "n\n", []string{"run", "-i", "--", "sh", "-c", "echo a > a"}, nil},
		{"-i asks again on an unknown answer", "maybe\nyes\n", []string{"run", "-i", "--", "sh", "-c", "echo a > a; echo b > b"}, []string{"a", "b"}},
		{"-i select asks again on an unknown answer", "s\nsure\ny\n", []string{"run", "-i", "--", "sh", "-c", "echo a > a"}, []string{"a"}},
		{"-i select", "s\nn\ny\n", []string{"run", "-i", "--", "sh", "-c", "echo a > a; echo b > b"}, []string{"b"}},
		{"-i select a dir answers for its contents", "s\ny\n", []string{"run", "-i", "--", "sh", "-c", "mkdir d; echo x > d/x; echo y > d/y"}, []string{"d", "d/x", "d/y"}},
		{"-i with no answer commits nothing", "", []string{"run", "-i", "--", "sh", "-c", "echo a > a"}, nil},
		{"-i with only unknown answers commits nothing", "what\n", []string{"run", "-i", "--", "sh", "-c", "echo a > a"}, nil},
		// A block is not offered, nor committed, unless --force says a person decided.
		{"-i on a block", "y\n", []string{"run", "-i", "--policy", block, "--", "sh", "-c", "echo a > a"}, nil},
		{"-i --force on a block", "y\n", []string{"run", "-i", "--force", "--policy", block, "--", "sh", "-c", "echo a > a"}, []string{"a"}},
		{"--commit on a block", "", []string{"run", "--commit", "--policy", block, "--", "sh", "-c", "echo a > a"}, nil},
		{"--commit --force on a block", "", []string{"run", "--commit", "--force", "--policy", block, "--", "sh", "-c", "echo a > a"}, []string{"a"}},
	}
	// What a case must also say (stdout or stderr).
	says := map[string]string{
		"-i no":                                        "nothing committed; tr_",
		"-i no says the trial is left pending":         "is left pending (dryexec commit tr_",
		"-i asks again on an unknown answer":           `"maybe" is not an answer here: type one of y, yes, n, no, s, select`,
		"-i select asks again on an unknown answer":    `"sure" is not an answer here`,
		"-i with no answer commits nothing":            "is left pending",
		"-i with only unknown answers commits nothing": "is left pending",
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			args := append([]string{tt.args[0], "-C", dir}, tt.args[1:]...)
			_, out, errs := run(tt.stdin, args...)
			if !strings.Contains(out+errs, says[tt.name]) {
				t.Errorf("no %q in\n%s%s", says[tt.name], out, errs)
			}
			var got []string
			filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
				if err == nil && p != dir {
					rel, _ := filepath.Rel(dir, p)
					got = append(got, rel)
				}
				return nil
			})
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("host has %v, want %v", got, tt.want)
			}
		})
	}
}

// TestCommitTamperedStore is the red team's finding: trials/ID/delta.json
// edited after the trial to point a file elsewhere (at /etc/… in the
// finding; at another directory here). `dryexec verify` says the delta
// changed after signing, and `dryexec commit` must refuse it, writing
// nothing anywhere.
func TestCommitTamperedStore(t *testing.T) {
	requireNS(t)
	dir, elsewhere, home := t.TempDir(), t.TempDir(), t.TempDir()
	code, out, errs := cli(t, home, "run", "--json", "-C", dir, "--", "sh", "-c", "echo harmless > notes.txt")
	if code != 0 {
		t.Fatalf("run: %d %s", code, errs)
	}
	d := decode(t, out)
	stored := filepath.Join(home, "trials", d.TrialID, "delta.json")
	b, err := os.ReadFile(stored)
	if err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(elsewhere, "passwd")
	edited := strings.Replace(string(b), `"path": "`+filepath.Join(dir, "notes.txt")+`"`, `"path": "`+target+`"`, 1)
	if edited == string(b) {
		t.Fatal("the delta does not name notes.txt")
	}
	os.WriteFile(stored, []byte(edited), 0o600)
	if code, _, errs := cli(t, home, "verify", d.TrialID); code != ExitRefused || !strings.Contains(errs, "changed after it was signed") {
		t.Fatalf("verify: %d %s", code, errs)
	}
	code, _, errs = cli(t, home, "commit", d.TrialID)
	if code != ExitRefused || !strings.Contains(errs, "does not verify") || !strings.Contains(errs, "changed after it was signed") {
		t.Fatalf("commit of a tampered trial: %d %q", code, errs)
	}
	for _, d := range []string{dir, elsewhere} {
		if ents, _ := os.ReadDir(d); len(ents) > 0 {
			t.Errorf("%s holds %v after the refused commit", d, ents)
		}
	}
}
