package linuxns

import (
	"context"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
)

// Markers in a fake dryexec home: none may reach a sandbox's output.
const (
	ownToken = "TOKEN-7f3c-never-in-a-sandbox"
	ownDelta = "DELTA-OF-ANOTHER-TRIAL-5be1"
	ownKey   = "PRIVATE-KEY-MARKER-90ad"
)

// ownNames are names inside the fake home that listing must not show.
var ownNames = []string{"serve", "tr_other", "receipt-key.pem"}

// makeOwnHome fills home as dryexec keeps it: the daemon's bearer token,
// another trial's delta and blobs, the receipt key.
func makeOwnHome(t *testing.T, home string) {
	t.Helper()
	for p, body := range map[string]string{
		"serve/token":                   ownToken,
		"trials/tr_other/delta.json":    `{"note":"` + ownDelta + `"}`,
		"trials/tr_other/blobs/ab/abcd": ownDelta,
		"receipt-key.pem":               ownKey,
		"netsim-ca/ca-key.pem":          ownKey,
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(home, p)), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(home, p), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// ownStateRoutes is a shell script that tries every way we know to read,
// list or change dryexec's home and to reach its socket from inside a
// sandbox, printing on stdout whatever it gets.
func ownStateRoutes(home, sock string) string {
	parent := filepath.Dir(home)
	return strings.Join([]string{
		"H=" + home + " S=" + sock + " P=" + parent,
		`cat $H/serve/token`,
		`cat $H/trials/tr_other/delta.json $H/trials/tr_other/blobs/ab/abcd`,
		`cat $H/receipt-key.pem $H/netsim-ca/ca-key.pem`,
		`ls -A $H $H/trials $H/serve`,
		`find $H`,
		`cat /proc/self/root$H/serve/token`,
		`cat /proc/1/root$H/serve/token`,
		`ln $H/serve/token /tmp/hardlink && cat /tmp/hardlink`,
		`mv $H /tmp/moved && cat /tmp/moved/serve/token`,
		`mv $P $P.moved && cat $P.moved/$(basename $H)/serve/token; mv $P.moved $P`,
		`chmod 755 $H; ls -A $H; cat $H/serve/token`,
		`echo forged > $H/serve/token; echo new > $H/new; mkdir $H/d; rm -rf $H/trials`,
		`unshare -Urm sh -c "umount -l $H; cat $H/serve/token"`,
		`/usr/bin/python3 -c "import socket; s=socket.socket(socket.AF_UNIX); s.connect('$S'); print('connected-to-the-socket')"`,
		`exit 0`,
	}, "\n")
}

// checkOwnStateHidden says what of the fake home or socket reached out.
func checkOwnStateHidden(t *testing.T, stdout string, accepted int64) {
	t.Helper()
	for _, leak := range append([]string{ownToken, ownDelta, ownKey, "connected-to-the-socket"}, ownNames...) {
		if strings.Contains(stdout, leak) {
			t.Errorf("the sandbox got %q of dryexec's own state; stdout:\n%s", leak, stdout)
		}
	}
	if accepted != 0 {
		t.Errorf("the sandbox connected to dryexec's socket %d times", accepted)
	}
}

// listenOwnSocket listens on path and counts connections.
func listenOwnSocket(t *testing.T, path string) *atomic.Int64 {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	var n atomic.Int64
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			n.Add(1)
			c.Close()
		}
	}()
	return &n
}

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
	}{
		{"a daemon's own paths", func(t *testing.T, tmp, run string) (string, string, dryexec.TrialSpec) {
			home, sock := tmp+"/daemon-home", run+"/d.sock"
			return home, sock, dryexec.TrialSpec{OwnPaths: []string{home, sock}}
		}},
		{"DRYEXEC_HOME and XDG_RUNTIME_DIR", func(t *testing.T, tmp, run string) (string, string, dryexec.TrialSpec) {
			home := tmp + "/dryexec-home"
			t.Setenv("DRYEXEC_HOME", home)
			t.Setenv("XDG_RUNTIME_DIR", run)
			return home, run + "/dryexec.sock", dryexec.TrialSpec{}
		}},
		{"the XDG default beneath HOME", func(t *testing.T, tmp, run string) (string, string, dryexec.TrialSpec) {
			t.Setenv("HOME", tmp+"/home")
			t.Setenv("DRYEXEC_HOME", "")
			t.Setenv("XDG_STATE_HOME", "")
			t.Setenv("XDG_RUNTIME_DIR", run)
			return tmp + "/home/.local/state/dryexec", run + "/dryexec.sock", dryexec.TrialSpec{}
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			tmp := t.TempDir()
			// A socket's path must be short (108 bytes).
			run, err := os.MkdirTemp("", "dx")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { os.RemoveAll(run) })
			home, sock, spec := tc.setup(t, tmp, run)
			makeOwnHome(t, home)
			accepted := listenOwnSocket(t, sock)
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
			spec.Action = dryexec.Action{Argv: []string{"/bin/sh", "-c", ownStateRoutes(home, sock)}, Cwd: work, Env: testPath}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			d, err := (&Rung{}).Trial(ctx, spec)
			if err != nil {
				t.Fatal(err)
			}
			validate(t, d)
			checkOwnStateHidden(t, d.Process.Stdout, accepted.Load())
			for _, f := range d.Files {
				if strings.HasPrefix(f.Path, home) || f.Path == sock {
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
