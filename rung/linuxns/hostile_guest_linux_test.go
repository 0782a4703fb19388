package linuxns

import (
	"context"
	"errors"
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/policy"
	"github.com/dryexec/dryexec/wire"
	"golang.org/x/sys/unix"
)

// hostileGuestEnv makes this test binary, re-executed as the guest, play a
// guest that breaks the trial protocol in the way it names (TestMain).
const hostileGuestEnv = "DRYEXEC_TEST_HOSTILE_GUEST"

// hostileGuest speaks the trial protocol up to trial.run as a real guest
// would, then misbehaves as script says, and waits for the host to hang up.
func hostileGuest(script string) int {
	conn := wire.NewConn(os.NewFile(wire.CtrlFD, "ctrl"))
	conn.Send(wire.KindHello, "", 0, &wire.Hello{Version: wire.Version, Role: wire.RoleNSTrial})
	f, err := conn.Read()
	if err != nil {
		return 1
	}
	var cfg wire.TrialStart
	f.Decode(&cfg)
	uppers := []string{cfg.Mounts[0].Path}
	if script == "upper not a clean absolute path" {
		uppers = []string{"/tmp/../etc"}
	}
	// A scratch tmpfs as a real guest keeps one, with one file in its only
	// upper dir: what the host's own walk must find.
	scratch, err := hostileScratch()
	if err != nil {
		conn.Send(wire.KindErr, "", 0, &wire.RemoteError{Code: "setup", Message: err.Error()})
		return 1
	}
	conn.Send(wire.KindEvent, wire.VerbTrialMounts, 0, &wire.TrialMounts{Paths: uppers, ScratchFD: scratch})
	conn.Read() // trial.joined
	if script != "exit before ready" {
		conn.Send(wire.KindEvent, wire.VerbTrialReady, 0, nil)
	}
	conn.Read() // trial.run
	exit := &wire.TrialExit{}
	escaping := &wire.FSEntry{Mount: 0, Path: "../etc/shadow", Kind: wire.EntryDir, Mode: 0o755}
	switch script {
	case "exit before ready":
		conn.Send(wire.KindEvent, wire.VerbTrialExit, 0, exit)
	case "exit twice":
		conn.Send(wire.KindEvent, wire.VerbTrialExit, 0, exit)
		conn.Send(wire.KindEvent, wire.VerbTrialExit, 0, exit)
	case "entry before exit":
		conn.Send(wire.KindEvent, wire.VerbFSEntry, 0, &wire.FSEntry{Path: "x", Kind: wire.EntryDir, Mode: 0o755})
	case "done before exit":
		conn.Send(wire.KindEvent, wire.VerbTrialDone, 0, &wire.TrialDone{})
	case "entry escaping its mount":
		conn.Send(wire.KindEvent, wire.VerbTrialExit, 0, exit)
		conn.Send(wire.KindEvent, wire.VerbFSEntry, 0, escaping)
	case "hole longer than the file", "hole of no bytes":
		conn.Send(wire.KindEvent, wire.VerbTrialExit, 0, exit)
		conn.Send(wire.KindEvent, wire.VerbFSEntry, 0, &wire.FSEntry{Path: "dryexec-hostile-x", Kind: wire.EntryFile, Mode: 0o644, Size: 10})
		n := int64(11)
		if script == "hole of no bytes" {
			n = 0
		}
		conn.Send(wire.KindEvent, wire.VerbFSData, 0, nil, []byte("abc"))
		conn.Send(wire.KindEvent, wire.VerbFSHole, 0, &wire.FSHole{N: n})
	case "entry on an unknown mount":
		conn.Send(wire.KindEvent, wire.VerbTrialExit, 0, exit)
		conn.Send(wire.KindEvent, wire.VerbFSEntry, 0, &wire.FSEntry{Mount: 7, Path: "x", Kind: wire.EntryDir, Mode: 0o755})
	case "exits without a report":
		return 0
	case "garbage frame":
		conn.Send(wire.KindEvent, "no.such.verb", 0, nil)
	case "hangs without a report":
		for {
			if _, err := conn.Read(); err != nil {
				return 0
			}
		}
	}
	conn.Send(wire.KindEvent, wire.VerbTrialDone, 0, &wire.TrialDone{})
	for {
		if _, err := conn.Read(); err != nil {
			return 0
		}
	}
}

// hostileScratch makes a scratch tmpfs in the guest's own mount namespace
// (made private first, so nothing reaches the host's) with u/0/salvaged in
// it, and returns its O_PATH descriptor.
func hostileScratch() (int, error) {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return -1, err
	}
	if err := unix.Mount("hostile", "/dev/shm", "tmpfs", 0, "size=1m"); err != nil {
		return -1, err
	}
	if err := os.MkdirAll("/dev/shm/u/0", 0o755); err != nil {
		return -1, err
	}
	if err := os.WriteFile("/dev/shm/u/0/"+salvagedName, []byte(salvagedText), 0o644); err != nil {
		return -1, err
	}
	return unix.Open("/dev/shm", unix.O_PATH|unix.O_DIRECTORY, 0)
}

// What a hostile guest's upper dir holds.
const (
	salvagedName = "dryexec-salvaged-by-the-host"
	salvagedText = "written before the guest broke the protocol\n"
)

// TestHostileGuest: a guest that breaks the protocol after the command was
// sent (one taken over by the command, say) does not get the trial refused
// with no delta: the host walks the upper dirs itself and returns an
// Incomplete delta saying why, which the decision engine blocks. A guest
// that breaks it before (nothing ran) gets ErrGuest. Each case is a guard in
// converse or ready that nothing else exercises.
func TestHostileGuest(t *testing.T) {
	requireNS(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		script, want string
		ran          bool // the command was sent: an incomplete delta, else ErrGuest
	}{
		{"exit before ready", `event "trial.exit" before trial.ready`, true},
		{"exit twice", "trial.exit twice", true},
		{"entry before exit", "fs.entry before trial.exit", true},
		{"done before exit", "trial.done before trial.exit", true},
		{"entry escaping its mount", "../etc/shadow", true},
		{"entry on an unknown mount", "mount", true},
		{"exits without a report", "exited (status 0)", true},
		{"garbage frame", "no.such.verb", true},
		{"hole longer than the file", "a hole of 11 bytes with 7 left", true},
		{"hole of no bytes", "a hole of 0 bytes", true},
		{"hangs without a report", "no report within the command's timeout and 200ms more", true},
		{"upper not a clean absolute path", "outside the planned mounts", false},
	}
	engine, err := policy.Compile(policy.Default())
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.script, func(t *testing.T) {
			// The rung starts its guest with an empty environment: a script
			// sets the variable and execs this binary.
			script := filepath.Join(t.TempDir(), "guest")
			body := "#!/bin/sh\n" + hostileGuestEnv + "='" + tc.script + "' exec " + self + " \"$@\"\n"
			if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			dir := t.TempDir()
			// A guest that never reports is given the command's timeout and
			// the walk grace, then killed: both are short for the case that
			// hangs, and long for the others, whose guest ends by itself and
			// must be seen to (a slow start under -race once let the short
			// timer fire first).
			timeout, grace := int64(30_000), 30*time.Second
			if tc.script == "hangs without a report" {
				timeout, grace = 100, 200*time.Millisecond
			}
			d, err := (&Rung{GuestExe: script, WalkGrace: grace}).Trial(ctx, dryexec.TrialSpec{
				Action: dryexec.Action{Argv: []string{"true"}, Cwd: dir, Env: testPath, TimeoutMS: timeout}})
			if !tc.ran {
				if !errors.Is(err, dryexec.ErrGuest) || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("err %v, want ErrGuest about %q", err, tc.want)
				}
				if d != nil {
					t.Fatalf("a delta from a guest that broke the protocol before anything ran: %+v", d)
				}
				return
			}
			if err != nil {
				t.Fatalf("a guest that broke the protocol after the command was sent: %v, want an incomplete delta", err)
			}
			validate(t, d)
			if !d.Incomplete || !strings.Contains(d.IncompleteReason, tc.want) || !strings.Contains(d.IncompleteReason, "host's own walk") {
				t.Fatalf("incomplete %v, reason %q: want incomplete, about %q and the host's own walk", d.Incomplete, d.IncompleteReason, tc.want)
			}
			want := path.Join("/", salvagedName)
			if len(d.Files) != 1 || d.Files[0].Path != want || d.Files[0].Op != dryexec.OpCreate || d.Files[0].SHA256 != sha256hex([]byte(salvagedText)) {
				t.Fatalf("files %+v, want only the upper dir's %s, from the host's walk", d.Files, want)
			}
			if r := engine.Decide(ctx, d); r.Decision.Choice != policy.Block {
				t.Fatalf("decision %s (%q), want block", r.Decision.Choice, r.Decision.Reasons)
			}
		})
	}
}
