package vm_test

import (
	"slices"
	"testing"
	"time"

	"github.com/dryexec/dryexec/session"
)

// TestSessionForkMemory: a vm session forks by its VM's memory. Each branch
// is a VM restored from the parent's saved state, the same guest process
// (its start time in the VM unchanged) with the parent's shell state and
// workspace; a branch's diff is since the fork, DiffOrigin since the
// parent's baseline; branches and parent do not see each other's writes;
// Keep takes one branch's changes into the parent and closes the others.
func TestSessionForkMemory(t *testing.T) {
	requireVMSession(t)
	s := openVM(t, session.Options{})
	ctx := t.Context()
	sh := func(s *session.Session, cmd string) string {
		t.Helper()
		r, err := s.Shell(ctx, cmd, time.Minute)
		if err != nil || r.ExitCode != 0 {
			t.Fatalf("%q: %v %+v", cmd, err, r)
		}
		return r.Stdout
	}
	sh(s, "echo base > base.txt")
	if _, err := s.Diff(ctx, true); err != nil {
		t.Fatal(err)
	}
	guest := sh(s, "mkdir sub && cd sub && echo parent > f.txt && export V=1 && cut -d' ' -f22 /proc/1/stat")
	bs, err := s.Fork(ctx, 2)
	if err != nil {
		t.Fatalf("fork: %v", err)
	}
	for _, b := range bs {
		t.Cleanup(func() { b.Close() })
	}
	for i, b := range bs {
		if got, want := sh(b, "pwd; echo $V; cat f.txt; cut -d' ' -f22 /proc/1/stat"), "/workspace/sub\n1\nparent\n"+guest; got != want {
			t.Errorf("branch %d: %q, want %q (cwd, variable, file, the parent's guest)", i, got, want)
		}
		d, err := b.Diff(ctx, false)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Empty() {
			t.Errorf("branch %d: a diff at the fork: %v", i, d.Paths())
		}
	}
	sh(bs[0], "echo zero > g.txt")
	sh(bs[1], "echo one > g.txt")
	sh(s, "echo mine > p.txt")
	if got := sh(s, "cat g.txt 2>/dev/null || echo none"); got != "none\n" {
		t.Errorf("the parent sees a branch's write: %q", got)
	}
	if got := sh(bs[1], "cat p.txt 2>/dev/null || echo none; cat g.txt"); got != "none\none\n" {
		t.Errorf("branch 1: %q, want none of the parent's or branch 0's writes", got)
	}
	d, err := bs[0].Diff(ctx, false)
	if err != nil {
		t.Fatal(err)
	}
	if got := d.Paths(); !slices.Equal(got, []string{"sub/g.txt"}) {
		t.Errorf("branch 0's diff: %v, want [sub/g.txt] (since the fork)", got)
	}
	o, err := bs[0].DiffOrigin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := o.Paths(); !slices.Equal(got, []string{"sub/f.txt", "sub/g.txt"}) {
		t.Errorf("branch 0's origin diff: %v, want [sub/f.txt sub/g.txt]", got)
	}
	if err := s.Keep(ctx, bs[0]); err != nil {
		t.Fatalf("keep: %v", err)
	}
	if got := sh(s, "cat g.txt p.txt"); got != "zero\nmine\n" {
		t.Errorf("the parent after keep: %q", got)
	}
	if _, err := bs[1].Shell(ctx, "true", time.Minute); err == nil {
		t.Errorf("the other branch after keep: %v, want it closed", err)
	}
}
