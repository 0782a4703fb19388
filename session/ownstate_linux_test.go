package session

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/dryexec/dryexec/internal/ownstate"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/rung/linuxns"
)

// TestNSSessionOwnStateHidden: an ns session hides dryexec's own state as a
// trial does — the caller's OwnPaths and the default places (DRYEXEC_HOME
// here) — with no default masks asked for; the host's files are unchanged
// and the session's diff holds nothing of them.
func TestNSSessionOwnStateHidden(t *testing.T) {
	testreq.Need(t, testreq.NS, (&linuxns.Rung{}).Available(context.Background()))
	tmp := t.TempDir()
	home := tmp + "/dryexec-home"
	t.Setenv("DRYEXEC_HOME", home)
	ownstate.MakeHome(t, home)
	run := ownstate.ShortDir(t)
	sock := run + "/d.sock"
	accepted := ownstate.Listen(t, sock)
	before := tree(t, home)
	ctx := testCtx(t)
	s, err := Open(ctx, Options{Rung: "ns", NoDefaultMasks: true, OwnPaths: []string{sock}, NetCADir: tmp + "/ca"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	r, err := s.Shell(ctx, ownstate.Routes(home, sock), time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	ownstate.Check(t, r.Transcript, accepted.Load())
	if after := tree(t, home); after != before {
		t.Errorf("dryexec's home changed on the host:\n%s\n→\n%s", before, after)
	}
}

// tree lists every path under root with its content.
func tree(t *testing.T, root string) string {
	t.Helper()
	out := ""
	filepath.Walk(root, func(p string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		out += p + " " + info.Mode().String()
		if info.Mode().IsRegular() {
			b, _ := os.ReadFile(p)
			out += " " + string(b)
		}
		out += "\n"
		return nil
	})
	return out
}
