package escape

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/commit"
	"github.com/dryexec/dryexec/internal/deltatest"
	"github.com/dryexec/dryexec/internal/rootless"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/policy"
	"github.com/dryexec/dryexec/rung/linuxns"
	"golang.org/x/sys/unix"
)

// deltaTrial runs script in dir as a real ns trial and decides it with the
// default policy, plus denied (host globs the policy refuses).
func deltaTrial(t *testing.T, dir, script string, blobs deltatest.Blobs, denied ...string) *dryexec.StateDelta {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	d, err := (&linuxns.Rung{}).Trial(ctx, dryexec.TrialSpec{Blobs: blobs, Action: dryexec.Action{
		Argv: []string{"/bin/sh", "-c", script}, Cwd: dir, TimeoutMS: 60_000,
		Env: map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin"},
	}})
	if err != nil {
		t.Fatalf("trial: %v", err)
	}
	validate(t, d)
	if d.Process.ExitCode != 0 {
		t.Fatalf("the script failed (exit %d): %s%s", d.Process.ExitCode, d.Process.Stdout, d.Process.Stderr)
	}
	p := policy.Default()
	p.DeniedMutationTargets = append(p.DeniedMutationTargets, denied...)
	e, err := policy.Compile(p)
	if err != nil {
		t.Fatal(err)
	}
	e.Apply(ctx, d)
	return d
}

// TestDeltaTruth: what a command does in a trial, what the delta shows, what
// the policy decides and what commit writes must agree. Each case was a hole:
//
//   - ln_f_over_host_file: `ln -f a b` over two host files made them one inode
//     in the trial and the delta said so (one link_group), but commit wrote b
//     as a file of its own.
//   - touch_denied_target: a path whose mtime alone moved is listed as
//     touched, which the policy did not look at, yet commit sets its mtime on
//     the host: `touch /etc/hostname` was auto_commit, and commit wrote there.
func TestDeltaTruth(t *testing.T) {
	testreq.Need(t, testreq.NS, (&linuxns.Rung{}).Available(context.Background()))
	t.Run("ln_f_over_host_file", func(t *testing.T) {
		dir := t.TempDir()
		for n, s := range map[string]string{"a": "A\n", "b": "B\n"} {
			if err := os.WriteFile(filepath.Join(dir, n), []byte(s), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		blobs := deltatest.Blobs{}
		d := deltaTrial(t, dir, `ln -f a b`, blobs)
		groups := map[string]int{}
		for _, f := range d.Files {
			groups[filepath.Base(f.Path)] = f.LinkGroup
		}
		if groups["b"] == 0 || groups["a"] != groups["b"] {
			t.Fatalf("the delta does not show a and b as one file: link groups %v", groups)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		if _, err := commit.Apply(ctx, d, commit.Options{OpenBlob: blobs.Open, JournalDir: t.TempDir()}); err != nil {
			t.Fatalf("commit: %v", err)
		}
		var a, b unix.Stat_t
		if err := unix.Lstat(filepath.Join(dir, "a"), &a); err != nil {
			t.Fatal(err)
		}
		if err := unix.Lstat(filepath.Join(dir, "b"), &b); err != nil {
			t.Fatal(err)
		}
		if a.Ino != b.Ino || b.Nlink != 2 {
			t.Errorf("committed a (inode %d) and b (inode %d, %d links): two files where the delta showed one", a.Ino, b.Ino, b.Nlink)
		}
		if got, _ := os.ReadFile(filepath.Join(dir, "b")); string(got) != "A\n" {
			t.Errorf("b holds %q after commit, want %q", got, "A\n")
		}
	})
	t.Run("touch_denied_target", func(t *testing.T) {
		dir := t.TempDir()
		locked := filepath.Join(dir, "locked")
		if err := os.MkdirAll(locked, 0o755); err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(locked, "conf")
		if err := os.WriteFile(f, []byte("x\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		d := deltaTrial(t, dir, `touch -d @1000000000 locked/conf`, deltatest.Blobs{}, locked+"/**")
		if len(d.Touched) != 1 || d.Touched[0].Path != f {
			t.Fatalf("touched %+v, want %s alone", d.Touched, f)
		}
		if d.Decision.Choice != policy.Block || !strings.Contains(strings.Join(d.Decision.Reasons, "\n"), "mtime only") {
			t.Errorf("decision %s %q: want block for a denied target's mtime", d.Decision.Choice, d.Decision.Reasons)
		}
	})
}

// TestDeltaTruthRootless re-runs TestDeltaTruth as an unprivileged user.
func TestDeltaTruthRootless(t *testing.T) {
	rootless.Rerun(t, "^TestDeltaTruth$", 10*time.Minute)
}
