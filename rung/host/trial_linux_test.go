package host

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/acceptance"
)

// tree is the working directory every case starts from: a file, a script,
// a dir with a file in it, a symlink, a fifo and a hard-linked pair.
func tree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := acceptance.MakeDir(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("keep.txt", filepath.Join(dir, "ln")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "h1"), []byte("linked\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(filepath.Join(dir, "h1"), filepath.Join(dir, "h2")); err != nil {
		t.Fatal(err)
	}
	return dir
}

// snapshot is every path of dir with its kind, mode, size and content, so
// that a test can tell the trial left the host as it was.
func snapshot(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %v %d %d", p, fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
		if fi.Mode().IsRegular() {
			c, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " %q", c)
		}
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestTrial: a host trial's delta is the copy's changes against the
// working directory, op by op, the original is never touched, and the
// delta says it had no isolation.
func TestTrial(t *testing.T) {
	tests := []struct {
		name   string
		script string
		want   []string // "op path" (path relative to the working dir)
	}{
		{"nothing", `true`, nil},
		{"read only", `cat keep.txt sub/x >/dev/null; ls -R >/dev/null`, nil},
		{"acceptance", `echo new > a.txt; echo more >> keep.txt; rm gone.txt; chmod 755 s.sh; mkdir d; rm -r sub; touch -m keep.txt`,
			[]string{"chmod s.sh", "create a.txt", "delete gone.txt", "delete sub/x", "mkdir d", "modify keep.txt", "rmdir sub"}},
		{"rename file", `mv gone.txt moved.txt`, []string{"create moved.txt", "delete gone.txt"}},
		{"rename dir", `mv sub sub2`, []string{"create sub2/x", "delete sub/x", "mkdir sub2", "rmdir sub"}},
		{"new tree", `mkdir -p n/m && echo deep > n/m/f`, []string{"create n/m/f", "mkdir n", "mkdir n/m"}},
		{"write deep", `echo y >> sub/x`, []string{"modify sub/x"}},
		{"symlink", `ln -s s.sh l2; rm ln`, []string{"delete ln", "symlink l2"}},
		{"file over dir", `rm -r sub && echo f > sub`, []string{"create sub", "delete sub/x", "rmdir sub"}},
		{"dir over file", `rm gone.txt && mkdir gone.txt`, []string{"delete gone.txt", "mkdir gone.txt"}},
		{"fifo", `mkfifo p`, []string{"create p"}},
		{"hard link written", `echo more >> h1`, []string{"modify h1", "modify h2"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := tree(t)
			before := snapshot(t, dir)
			d, err := (&Rung{}).Trial(context.Background(), dryexec.TrialSpec{Action: dryexec.Action{
				Argv: []string{"sh", "-c", tc.script}, Cwd: dir, Env: map[string]string{"PATH": "/usr/bin:/bin"}}})
			if err != nil {
				t.Fatal(err)
			}
			if d.Process.ExitCode != 0 {
				t.Fatalf("exit %d: %s", d.Process.ExitCode, d.Process.Stderr)
			}
			var got []string
			for _, f := range d.Files {
				got = append(got, string(f.Op)+" "+strings.TrimPrefix(f.Path, dir+"/"))
			}
			slices.Sort(got)
			if !slices.Equal(got, tc.want) {
				t.Errorf("files:\n got %q\nwant %q", got, tc.want)
			}
			if d.Rung != Name || len(d.Warnings) == 0 || d.Warnings[0] != NoIsolation {
				t.Errorf("rung %q warnings %q: want host, no isolation first", d.Rung, d.Warnings)
			}
			if after := snapshot(t, dir); after != before {
				t.Errorf("the working dir changed:\n%s\nwas\n%s", after, before)
			}
		})
	}
}

// TestTrialProcess: exit codes, signals, the timeout, a missing command
// and the output are reported as the ns rung reports them, and a process
// the command left behind does not outlive the trial.
func TestTrialProcess(t *testing.T) {
	tests := []struct {
		name     string
		argv     []string
		timeout  int64
		exit     int
		signal   string
		timedOut bool
		stdout   string
	}{
		{"exit", []string{"sh", "-c", "echo out; exit 3"}, 0, 3, "", false, "out\n"},
		{"signal", []string{"sh", "-c", "kill -TERM $$"}, 0, 143, "SIGTERM", false, ""},
		{"timeout", []string{"sleep", "30"}, 200, 124, "SIGKILL", true, ""},
		{"not found", []string{"no-such-command-here"}, 0, 127, "", false, ""},
		{"background", []string{"sh", "-c", "(sleep 30; echo late) & echo now"}, 0, 0, "", false, "now\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			d, err := (&Rung{}).Trial(context.Background(), dryexec.TrialSpec{Action: dryexec.Action{
				Argv: tc.argv, Cwd: t.TempDir(), Env: map[string]string{"PATH": "/usr/bin:/bin"}, TimeoutMS: tc.timeout}})
			if err != nil {
				t.Fatal(err)
			}
			p := d.Process
			if p.ExitCode != tc.exit || p.Signal != tc.signal || p.TimedOut != tc.timedOut || p.Stdout != tc.stdout {
				t.Errorf("process %+v: want exit %d signal %q timed out %v stdout %q", p, tc.exit, tc.signal, tc.timedOut, tc.stdout)
			}
			if p.DurationNS <= 0 && tc.exit != 127 {
				t.Errorf("duration %d", p.DurationNS)
			}
		})
	}
}

// TestTrialRefusesNet: no network can be intercepted, so any --net spec,
// none included, is refused rather than silently not kept.
func TestTrialRefusesNet(t *testing.T) {
	for _, net := range [][]string{{"none"}, {"allow:example.com"}} {
		_, err := (&Rung{}).Trial(context.Background(), dryexec.TrialSpec{Net: net, Action: dryexec.Action{
			Argv: []string{"true"}, Cwd: t.TempDir()}})
		var iu *dryexec.IsolationUnavailableError
		if !errors.As(err, &iu) || iu.Rung != Name {
			t.Errorf("--net %v: %v, want an IsolationUnavailableError of host", net, err)
		}
	}
}
