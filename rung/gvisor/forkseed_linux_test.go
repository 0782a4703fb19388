package gvisor_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/rung/gvisor"
	"github.com/dryexec/dryexec/session"
)

// secret is the content of the masked file maskedSession makes.
const secret = "SECRET-KEY-MATERIAL"

// maskedSession opens a gvisor session with a host dir of the test's masked
// (secretDir, holding id_rsa with secret in it); tag names the test's other
// host paths. Both go with the test.
func maskedSession(t *testing.T, ctx context.Context) (s *session.Session, tag, secretDir string) {
	t.Helper()
	testreq.NeedRoot(t)
	testreq.Need(t, testreq.GVisor, (&gvisor.Rung{}).Available(ctx))
	tag = strconv.FormatInt(time.Now().UnixNano(), 36)
	secretDir = "/tmp/dryexec-gvsecret-" + tag
	if err := os.Mkdir(secretDir, 0o700); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(secretDir) })
	if err := os.WriteFile(filepath.Join(secretDir, "id_rsa"), []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s, err := session.Open(ctx, session.Options{Rung: gvisor.Name, Masks: []string{secretDir}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, tag, secretDir
}

// TestForkSeedForgeries tries, from a gvisor session, to leave in the
// view's upper dirs something that a branch's overlay (built on the host
// from a copy of those dirs) would read as overlayfs's own metadata or
// follow on the host: overlay xattrs (a redirect to a masked dir, opaque,
// metacopy; trusted.* and the rootless user.* form), device nodes (a
// whiteout's 0:0 and real devices), symlinks to a masked file and to a host
// file, a hard link to a host file. The branch must see no masked content
// and no host device, and the host must be unchanged.
func TestForkSeedForgeries(t *testing.T) {
	ctx := context.Background()
	s, tag, secretDir := maskedSession(t, ctx)
	victim := "/tmp/dryexec-gvvictim-" + tag
	attack := "/tmp/dryexec-gvattack-" + tag
	if err := os.WriteFile(victim, []byte("host\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(victim)
	shell := func(s *session.Session, cmd string) string {
		t.Helper()
		r, err := s.Shell(ctx, cmd, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return r.Stdout + r.Stderr
	}
	py := `import os
a = ` + strconv.Quote(attack) + `
os.mkdir(a)
def attempt(what, f):
    try:
        f()
        print("done", what)
    except OSError as e:
        print("refused", what, e.strerror)
for n, (kind, name, value) in enumerate([
        ("d", "trusted.overlay.redirect", ` + strconv.Quote(secretDir) + `),
        ("d", "user.overlay.redirect", ` + strconv.Quote(secretDir) + `),
        ("d", "trusted.overlay.opaque", "y"),
        ("d", "user.overlay.opaque", "y"),
        ("f", "trusted.overlay.metacopy", ""),
        ("f", "trusted.overlay.redirect", ` + strconv.Quote(secretDir+"/id_rsa") + `),
        ("f", "trusted.overlay.origin", "\0\xfb"),
        ("d", "trusted.dryexec", "x"),
        ("d", "security.dryexec", "x")]):
    p = a + "/x%d" % n
    if kind == "d":
        os.mkdir(p)
        open(p + "/id_rsa", "w").write("decoy\n")
    else:
        open(p, "w").write("decoy\n")
    attempt(p + " " + name, lambda: os.setxattr(p, name, value.encode()))
import stat
attempt("whiteout", lambda: os.mknod(a + "/wh", stat.S_IFCHR | 0o666, os.makedev(0, 0)))
attempt("chr 1:1", lambda: os.mknod(a + "/mem", stat.S_IFCHR | 0o666, os.makedev(1, 1)))
attempt("blk 7:0", lambda: os.mknod(a + "/loop", stat.S_IFBLK | 0o666, os.makedev(7, 0)))
attempt("symlink secret", lambda: os.symlink(` + strconv.Quote(secretDir+"/id_rsa") + `, a + "/lsecret"))
attempt("symlink secret dir", lambda: os.symlink(` + strconv.Quote(secretDir) + `, a + "/ldir"))
attempt("symlink victim", lambda: os.symlink(` + strconv.Quote(victim) + `, a + "/lvictim"))
attempt("hard link victim", lambda: os.link(` + strconv.Quote(victim) + `, a + "/hvictim"))
`
	t.Logf("parent:\n%s", shell(s, "python3 -c "+shQuote(py)))
	bs, err := s.Fork(ctx, 1)
	if err != nil {
		t.Fatal(err)
	}
	b := bs[0]
	defer b.Close()
	// In the branch: read every place, then write through the links.
	read := `cd ` + attack + ` && for p in x*/id_rsa x* lsecret ldir/id_rsa; do echo "== $p"; cat $p 2>&1; done; ls -la . ldir/ 2>&1;
head -c 64 mem 2>&1 | od -c | head -3; head -c 64 loop 2>&1 | od -c | head -3;
echo pwned > lvictim; echo pwned > hvictim; echo pwned > lsecret; cat lvictim hvictim`
	out := shell(b, read)
	t.Logf("branch:\n%s", out)
	if strings.Contains(out, secret) {
		t.Errorf("the branch read the masked file through a forged upper")
	}
	if got, _ := os.ReadFile(victim); string(got) != "host\n" {
		t.Errorf("the host file is now %q", got)
	}
	if got, _ := os.ReadFile(filepath.Join(secretDir, "id_rsa")); string(got) != secret+"\n" {
		t.Errorf("the masked file is now %q", got)
	}
	if _, err := os.Lstat(attack); err == nil {
		t.Errorf("the host has %s", attack)
	}
	// The parent sees its own as before, still without the secret.
	if out := shell(s, "cat "+attack+"/x0/id_rsa "+attack+"/lsecret 2>&1"); strings.Contains(out, secret) {
		t.Errorf("the parent read the masked file: %q", out)
	}
}

func shQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// TestForkCopySwapRace: a process the parent session left running swaps,
// over and over, directories of its own in /tmp (each holding a file named
// as the masked one) with symlinks to the masked dir (renameat2
// RENAME_EXCHANGE, atomic: the path never goes missing). The host copies the
// view's upper dirs for the fork by path; were the sandbox running while it
// copies, it would enter such a dir and then read through the symlink
// swapped in, on the host, past the masks. No branch may see the masked
// content, and the host must be unchanged.
func TestForkCopySwapRace(t *testing.T) {
	ctx := context.Background()
	s, tag, secretDir := maskedSession(t, ctx)
	attack := "/tmp/dryexec-gvswap-" + tag
	// The swapper says it has swapped every pair once (the marker) before
	// the command returns: the fork starts with it at work.
	py := `import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
a, sec = sys.argv[1], sys.argv[2]
os.mkdir(a)
os.chdir(a)
pairs = []
for i in range(200):
    os.mkdir("d%d" % i)
    open("d%d/id_rsa" % i, "w").write("decoy\n")
    os.symlink(sec, "l%d" % i)
    pairs.append((b"d%d" % i, b"l%d" % i))
if os.fork() == 0:
    os.setsid()
    marked = False
    while True:
        for d, l in pairs:
            if libc.syscall(316, -100, d, -100, l, 2) != 0:  # renameat2(RENAME_EXCHANGE)
                os._exit(1)
        if not marked:
            open("swapping", "w").close()
            marked = True
`
	r, err := s.Shell(ctx, "python3 -c "+shQuote(py)+" "+attack+" "+secretDir+" </dev/null >/dev/null 2>&1; "+
		"until [ -e "+attack+"/swapping ]; do :; done; echo swapping", time.Minute)
	if err != nil || r.Stdout != "swapping\n" {
		t.Fatalf("starting the swapper: %+v, %v", r, err)
	}
	for k := range 3 {
		bs, err := s.Fork(ctx, 1)
		if err != nil {
			t.Fatalf("fork %d: %v", k, err)
		}
		b := bs[0]
		r, err := b.Shell(ctx, "cat "+attack+"/[dl]*/id_rsa | sort | uniq -c", time.Minute)
		b.Close()
		if err != nil {
			t.Fatal(err)
		}
		if strings.Contains(r.Stdout, secret) {
			t.Fatalf("branch %d read the masked file through a swap during the fork's copy:\n%s", k, r.Stdout)
		}
		if !strings.Contains(r.Stdout, "decoy") {
			t.Errorf("branch %d: %q, want the decoys", k, r.Stdout+r.Stderr)
		}
	}
	if _, err := os.Lstat(attack); err == nil {
		t.Errorf("the host has %s", attack)
	}
	if got, _ := os.ReadFile(filepath.Join(secretDir, "id_rsa")); string(got) != secret+"\n" {
		t.Errorf("the masked file is now %q", got)
	}
}
