// Package ownstate is a test helper: a fake dryexec home (the daemon's bearer
// token, another trial's delta and blobs, the receipt key), a socket that
// counts connections, and a script that tries every route we know from inside
// a sandbox to read, list or change them. Trials (rung/linuxns), sessions and
// the daemon's trials and sessions (server) run the same script. Only _test
// files import it.
package ownstate

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// Markers in a fake dryexec home: none may reach a sandbox's output.
const (
	Token = "TOKEN-7f3c-never-in-a-sandbox"
	Delta = "DELTA-OF-ANOTHER-TRIAL-5be1"
	Key   = "PRIVATE-KEY-MARKER-90ad"
)

// names inside the fake home that listing must not show.
var names = []string{"serve", "tr_other", "receipt-key.pem"}

// MakeHome fills home as dryexec keeps it: the daemon's bearer token,
// another trial's delta and blobs, the receipt key, netsim's CA key. Files
// that exist are left as they are (a daemon's real home).
func MakeHome(t testing.TB, home string) {
	t.Helper()
	for p, body := range map[string]string{
		"serve/token":                   Token,
		"trials/tr_other/delta.json":    `{"note":"` + Delta + `"}`,
		"trials/tr_other/blobs/ab/abcd": Delta,
		"receipt-key.pem":               Key,
		"netsim-ca/ca-key.pem":          Key,
	} {
		full := filepath.Join(home, p)
		if _, err := os.Lstat(full); err == nil {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// Routes is a shell script that tries every way we know to read, list or
// change dryexec's home and to reach its socket from inside a sandbox,
// printing on stdout whatever it gets; extra commands run after the others
// (with $H the home); it always exits 0.
func Routes(home, sock string, extra ...string) string {
	parent := filepath.Dir(home)
	return strings.Join([]string{
		// Only what a route gets is output: error messages name the paths
		// (and a session's transcript mixes both streams).
		"exec 2>/dev/null",
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
	}, "\n") + "\n" + strings.Join(extra, "\n") + "\nexit 0\n"
}

// Check fails t if stdout holds anything of the fake home or says the
// socket answered, or if the socket accepted a connection.
func Check(t testing.TB, stdout string, accepted int64) {
	t.Helper()
	for _, leak := range append([]string{Token, Delta, Key, "connected-to-the-socket"}, names...) {
		if strings.Contains(stdout, leak) {
			t.Errorf("the sandbox got %q of dryexec's own state; stdout:\n%s", leak, stdout)
		}
	}
	if accepted != 0 {
		t.Errorf("the sandbox connected to dryexec's socket %d times", accepted)
	}
}

// Listen listens on the unix socket path until t ends and counts the
// connections it accepts.
func Listen(t testing.TB, path string) *atomic.Int64 {
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

// ShortDir makes a directory for sockets (whose paths must be short: 108
// bytes), removed when t ends.
func ShortDir(t testing.TB) string {
	t.Helper()
	d, err := os.MkdirTemp("", "dx")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(d) })
	return d
}
