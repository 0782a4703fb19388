package linuxns

import (
	"bufio"
	"context"
	"io"
	"maps"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/policy"
)

// TestGuestKilledMidTrial: the command's supervisor really dies mid-trial
// (killed from the host side once the command has written its files and
// said so on stdout). The trial still ends with a delta: Incomplete, with a
// reason that says the guest died, the files the command wrote (the host's
// own walk of the upper dirs), its output as captured, an exit status it
// does not pretend to know, and a decision of block.
func TestGuestKilledMidTrial(t *testing.T) {
	requireNS(t)
	dir := t.TempDir()
	if err := os.WriteFile(dir+"/old", []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := snapshot(t, dir)
	pids := make(chan int, 4)
	r := &Rung{}
	setGuestStarted(t, r, func(pid int) { pids <- pid })
	outR, outW := io.Pipe()
	defer outR.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	type result struct {
		d   *dryexec.StateDelta
		err error
	}
	done := make(chan result, 1)
	go func() {
		// The command never ends on its own: only the guest's death ends it.
		// The marker comes last, so everything the test expects is written
		// before the guest is killed.
		script := "printf new > new; echo changed > old; mkdir -p d/e; printf deep > d/e/f; " +
			"chmod 000 d/e/f; echo on-stderr >&2; echo files-written; exec sleep 1000"
		d, err := r.Trial(ctx, dryexec.TrialSpec{Action: dryexec.Action{Argv: []string{"/bin/sh", "-c", script},
			Cwd: dir, Env: testPath}, Stdout: outW})
		outW.Close()
		done <- result{d, err}
	}()
	guestPID := <-pids
	line, err := bufio.NewReader(outR).ReadString('\n')
	if err != nil || line != "files-written\n" {
		t.Fatalf("the command's marker: %q, %v", line, err)
	}
	go io.Copy(io.Discard, outR)
	if err := syscall.Kill(guestPID, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	res := <-done
	if res.err != nil {
		t.Fatalf("a trial whose guest was killed: %v, want an incomplete delta", res.err)
	}
	d := res.d
	validate(t, d)
	if !d.Incomplete || !strings.Contains(d.IncompleteReason, "died (killed)") || !strings.Contains(d.IncompleteReason, "host's own walk") {
		t.Fatalf("incomplete %v, reason %q: want incomplete, saying the guest died and the host walked", d.Incomplete, d.IncompleteReason)
	}
	got := map[string]dryexec.FileChange{}
	for _, f := range d.Files {
		got[f.Path] = f
	}
	for p, want := range map[string]struct {
		op  dryexec.Op
		sum string
	}{
		dir + "/new":   {dryexec.OpCreate, sha256hex([]byte("new"))},
		dir + "/old":   {dryexec.OpModify, sha256hex([]byte("changed\n"))},
		dir + "/d":     {dryexec.OpMkdir, ""},
		dir + "/d/e":   {dryexec.OpMkdir, ""},
		dir + "/d/e/f": {dryexec.OpCreate, sha256hex([]byte("deep"))},
	} {
		f, ok := got[p]
		if !ok || f.Op != want.op || f.SHA256 != want.sum {
			t.Errorf("%s: %+v (listed %v), want %s %s", p, f, ok, want.op, want.sum)
		}
	}
	if d.Process.ExitCode != -1 || d.Process.Stdout != "files-written\n" || d.Process.Stderr != "on-stderr\n" {
		t.Errorf("exit %d, stdout %q, stderr %q: want -1 (unknown) and the output as captured", d.Process.ExitCode, d.Process.Stdout, d.Process.Stderr)
	}
	engine, err := policy.Compile(policy.Default())
	if err != nil {
		t.Fatal(err)
	}
	if r := engine.Decide(ctx, d); r.Decision.Choice != policy.Block || !strings.Contains(strings.Join(r.Decision.Reasons, "\n"), "incomplete") {
		t.Errorf("decision %s %q, want block because the delta is incomplete", r.Decision.Choice, r.Decision.Reasons)
	}
	if after := snapshot(t, dir); !maps.Equal(after, before) {
		t.Errorf("the host changed: %q → %q", before, after)
	}
}
