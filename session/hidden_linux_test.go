package session

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/rung/linuxns"
)

// On the ns rung the workspace's layers sit on a mount the guest keeps attached
// but covered, and the guest holds the only path to them (its fds). A command
// tries every way we know to reach them; each must fail, and the diff must stay
// exactly what the command did through the workspace.
func TestNSLayersUnreachable(t *testing.T) {
	testreq.Need(t, testreq.NS, (&linuxns.Rung{}).Available(context.Background()))
	ctx := context.Background()
	s, err := Open(ctx, Options{Rung: "ns"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	attempts := []struct{ name, cmd string }{
		{"list the cover", `ls -A /dev/.dryexec`},
		{"unmount the cover", `umount /dev/.dryexec || umount -l /dev/.dryexec`},
		// Listing the fd numbers is allowed to a root command (the directory is
		// root's); following or reading the links needs ptrace access, which the
		// kernel refuses a command in a nested user namespace whose capabilities
		// are not the guest's (and, as a second wall, the guest is not dumpable).
		{"read the guest's fd links", `for f in /proc/1/fd/*; do readlink "$f" && exit 0; done; exit 1`},
		{"read the guest's memory", `head -c 1 /proc/1/mem`},
		{"open a layer through the guest's fd", `for f in /proc/1/fd/*; do ls "$f/ws/upper" && exit 0; done; exit 1`},
		{"write through the guest's root", `echo x > /proc/1/root/dev/.dryexec/ws/upper/forged`},
		{"mount over the workspace", `mount -t tmpfs none /workspace`},
	}
	for _, a := range attempts {
		r, err := s.Shell(ctx, a.cmd, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case a.name == "list the cover":
			if r.ExitCode != 0 || strings.TrimSpace(r.Stdout) != "" {
				t.Errorf("%s: exit %d, %q: the cover should show an empty directory", a.name, r.ExitCode, r.Stdout)
			}
		case r.ExitCode == 0:
			t.Errorf("%s succeeded: %q", a.name, r.Transcript)
		}
	}
	if _, err := s.Shell(ctx, "echo real > f", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	d, err := s.Diff(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Writes) != 1 || string(d.Writes["f"]) != "real\n" || len(d.Deletes) != 0 {
		t.Fatalf("diff: writes %v deletes %v", d.Writes, d.Deletes)
	}
}
