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
//   - chown_host_file: as root, `chown 65534 f` left no entry, was
//     auto_commit, and commit left f root's.
//   - unix_socket: a socket the command bound was auto_commit, though commit
//     refuses it by name.
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
	t.Run("chown_host_file", func(t *testing.T) {
		// As root the trial's ids are the host's: f is given away in the
		// trial and must be on the host after commit. Rootless (the rerun),
		// the chown fails in the trial as it does natively: no owner change
		// is listed and f stays the user's.
		root := os.Geteuid() == 0
		dir := t.TempDir()
		f := filepath.Join(dir, "f")
		if err := os.WriteFile(f, []byte("f\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		d := deltaTrial(t, dir, `chown 65534 f 2>/dev/null || true`, deltatest.Blobs{})
		var listed *dryexec.FileChange
		for i := range d.Files {
			if d.Files[i].Path == f {
				listed = &d.Files[i]
			}
		}
		switch {
		case root && (listed == nil || listed.Op != dryexec.OpChmod || !listed.OwnerChanged() || listed.UID != 65534 || *listed.BeforeUID != 0):
			t.Fatalf("the delta does not list f's new owner: %+v", d.Files)
		case !root && listed != nil:
			t.Fatalf("rootless, the delta lists f, which the trial could not chown: %+v", *listed)
		}
		if root && d.Decision.Choice == policy.AutoCommit {
			t.Errorf("decision %s %q: a file given to another user wants review", d.Decision.Choice, d.Decision.Reasons)
		}
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		if _, err := commit.Apply(ctx, d, commit.Options{JournalDir: t.TempDir()}); err != nil {
			t.Fatalf("commit: %v", err)
		}
		var st unix.Stat_t
		if err := unix.Lstat(f, &st); err != nil {
			t.Fatal(err)
		}
		want := [2]uint32{65534, 0}
		if !root {
			want = [2]uint32{uint32(os.Geteuid()), uint32(os.Getegid())}
		}
		if st.Uid != want[0] || st.Gid != want[1] {
			t.Errorf("after commit f is %d:%d, want %d:%d as after the native run", st.Uid, st.Gid, want[0], want[1])
		}
	})
	t.Run("unix_socket", func(t *testing.T) {
		dir := t.TempDir()
		d := deltaTrial(t, dir, `python3 -c 'import socket; socket.socket(socket.AF_UNIX).bind("sock")'`, deltatest.Blobs{})
		if d.Decision.Choice == policy.AutoCommit || !strings.Contains(strings.Join(d.Decision.Reasons, "\n"), "commit cannot create a unix socket") {
			t.Errorf("decision %s %q: commit refuses the socket, the decision must say so", d.Decision.Choice, d.Decision.Reasons)
		}
	})
}

// TestDeltaTruthRootless re-runs TestDeltaTruth as an unprivileged user.
func TestDeltaTruthRootless(t *testing.T) {
	rootless.Rerun(t, "^TestDeltaTruth$", 10*time.Minute)
}
