package linuxns

import (
	"context"
	"maps"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/ownstate"
	"github.com/dryexec/dryexec/internal/testreq"
	"golang.org/x/sys/unix"
)

// TestOwnStateHidden: dryexec's own state — the daemon's home with its bearer
// token, every other trial's delta and blobs, the receipt key; the daemon's
// socket — is neither readable, listable nor writable from a trial, by any
// route the script knows (the path, /proc/self/root, the guest's root, a hard
// link, renaming it or its parent, chmod, a user namespace of its own, the
// socket), whether the caller names it (OwnPaths: the daemon) or it is where
// dryexec keeps it by default (DRYEXEC_HOME, ~/.local/state/dryexec,
// $XDG_RUNTIME_DIR/dryexec.sock), and no_default_masks does not turn it off.
// The host's files are unchanged and the delta lists nothing of them.
func TestOwnStateHidden(t *testing.T) {
	requireNS(t)
	cases := []struct {
		name  string
		setup func(t *testing.T, tmp, run string) (home, sock string, spec dryexec.TrialSpec)
		// alias, when set, bind-mounts the home's parent elsewhere on the host
		// (root only) and returns the home's path there, which the routes use.
		alias func(t *testing.T, tmp, home string) string
	}{
		{"a daemon's own paths", func(t *testing.T, tmp, run string) (string, string, dryexec.TrialSpec) {
			home, sock := tmp+"/daemon-home", run+"/d.sock"
			return home, sock, dryexec.TrialSpec{OwnPaths: []string{home, sock}}
		}, nil},
		{"DRYEXEC_HOME and XDG_RUNTIME_DIR", func(t *testing.T, tmp, run string) (string, string, dryexec.TrialSpec) {
			home := tmp + "/dryexec-home"
			t.Setenv("DRYEXEC_HOME", home)
			t.Setenv("XDG_RUNTIME_DIR", run)
			return home, run + "/dryexec.sock", dryexec.TrialSpec{}
		}, nil},
		{"a bind mount of its parent elsewhere", func(t *testing.T, tmp, run string) (string, string, dryexec.TrialSpec) {
			home, sock := tmp+"/data/daemon-home", run+"/d.sock"
			return home, sock, dryexec.TrialSpec{OwnPaths: []string{home, sock}}
		}, func(t *testing.T, tmp, home string) string {
			testreq.NeedRoot(t)
			if err := os.Mkdir(tmp+"/alias", 0o755); err != nil {
				t.Fatal(err)
			}
			if err := unix.Mount(tmp+"/data", tmp+"/alias", "", unix.MS_BIND, ""); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { unix.Unmount(tmp+"/alias", unix.MNT_DETACH) })
			return tmp + "/alias/daemon-home"
		}},
		{"the XDG default beneath HOME", func(t *testing.T, tmp, run string) (string, string, dryexec.TrialSpec) {
			t.Setenv("HOME", tmp+"/home")
			t.Setenv("DRYEXEC_HOME", "")
			t.Setenv("XDG_STATE_HOME", "")
			t.Setenv("XDG_RUNTIME_DIR", run)
			return tmp + "/home/.local/state/dryexec", run + "/dryexec.sock", dryexec.TrialSpec{}
		}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tmp := t.TempDir()
			run := ownstate.ShortDir(t)
			home, sock, spec := tc.setup(t, tmp, run)
			ownstate.MakeHome(t, home)
			seen := home // the path the routes try
			if tc.alias != nil {
				seen = tc.alias(t, tmp, home)
			}
			accepted := ownstate.Listen(t, sock)
			work := tmp + "/work"
			if err := os.Mkdir(work, 0o755); err != nil {
				t.Fatal(err)
			}
			if _, err := EnsureCA(tmp + "/ca"); err != nil {
				t.Fatal(err)
			}
			before := snapshot(t, tmp)
			maps.Copy(before, snapshot(t, run))
			// netsim's CA elsewhere: the rung makes it on the host when missing.
			spec.NoDefaultMasks, spec.NetCADir = true, tmp+"/ca"
			spec.Action = dryexec.Action{Argv: []string{"/bin/sh", "-c", ownstate.Routes(seen, sock)}, Cwd: work, Env: testPath}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			d, err := (&Rung{}).Trial(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			validate(t, d)
			ownstate.Check(t, d.Process.Stdout, accepted.Load())
			for _, f := range d.Files {
				if strings.HasPrefix(f.Path, home) || strings.HasPrefix(f.Path, seen) || f.Path == sock {
					t.Errorf("the delta changes dryexec's own state: %s %s", f.Op, f.Path)
				}
			}
			after := snapshot(t, tmp)
			maps.Copy(after, snapshot(t, run))
			if !maps.Equal(after, before) {
				t.Errorf("the host changed:\nbefore %q\nafter  %q", before, after)
			}
			if t.Failed() {
				t.Logf("stderr:\n%s", d.Process.Stderr)
			}
		})
	}
}

// TestPrivateTempHidden: what a rung or session keeps in a
// dryexec.PrivateTemp dir (a fork's memory image and copied upper dirs while
// the fork runs, a spilled delta) is not readable from another trial, which
// sees the host's /tmp.
func TestPrivateTempHidden(t *testing.T) {
	requireNS(t)
	tmp := t.TempDir()
	t.Setenv("DRYEXEC_HOME", tmp+"/home")
	dir, err := dryexec.PrivateTemp(os.Getenv, "fork-")
	if err != nil {
		t.Fatal(err)
	}
	const secret = "MEMORY-IMAGE-OF-ANOTHER-SESSION-41c2"
	if err := os.WriteFile(dir+"/pages.img", []byte(secret), 0o600); err != nil {
		t.Fatal(err)
	}
	spec := dryexec.TrialSpec{Action: dryexec.Action{
		Argv: []string{"/bin/sh", "-c", `cat "$1"/pages.img; ls -a "$1"; cat /proc/self/root"$1"/pages.img`, "sh", dir},
		Cwd:  tmp, Env: testPath}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := (&Rung{}).Trial(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(d.Process.Stdout, secret) || strings.Contains(d.Process.Stdout, "pages.img") {
		t.Errorf("a trial read another sandbox's private temp dir %s:\n%s", dir, d.Process.Stdout)
	}
}
