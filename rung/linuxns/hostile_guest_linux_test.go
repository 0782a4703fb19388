package linuxns

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/fsdelta"
	"github.com/dryexec/dryexec/guest"
	"github.com/dryexec/dryexec/wire"
)

// hostileGuestEnv makes this test binary, re-executed as the guest, play a
// guest that breaks the trial protocol in the way it names (TestMain).
const hostileGuestEnv = "DRYEXEC_TEST_HOSTILE_GUEST"

// hostileGuest speaks the trial protocol up to trial.run as a real guest
// would, then misbehaves as script says, and waits for the host to hang up.
func hostileGuest(script string) int {
	conn := wire.NewConn(os.NewFile(wire.CtrlFD, "ctrl"))
	conn.Send(wire.KindHello, "", 0, &wire.Hello{Version: wire.Version, Role: guest.RoleNSTrial})
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
	conn.Send(wire.KindEvent, wire.VerbTrialMounts, 0, &wire.TrialMounts{Paths: uppers})
	conn.Read() // trial.joined
	conn.Read() // trial.run
	exit := &wire.TrialExit{}
	escaping := &fsdelta.Entry{Mount: 0, Path: "../etc/shadow", Kind: fsdelta.EntryDir, Mode: 0o755}
	switch script {
	case "exit twice":
		conn.Send(wire.KindEvent, wire.VerbTrialExit, 0, exit)
		conn.Send(wire.KindEvent, wire.VerbTrialExit, 0, exit)
	case "entry before exit":
		conn.Send(wire.KindEvent, wire.VerbFSEntry, 0, &fsdelta.Entry{Path: "x", Kind: fsdelta.EntryDir, Mode: 0o755})
	case "done before exit":
		conn.Send(wire.KindEvent, wire.VerbTrialDone, 0, &wire.TrialDone{})
	case "entry escaping its mount":
		conn.Send(wire.KindEvent, wire.VerbTrialExit, 0, exit)
		conn.Send(wire.KindEvent, wire.VerbFSEntry, 0, escaping)
	case "hole longer than the file", "hole of no bytes":
		conn.Send(wire.KindEvent, wire.VerbTrialExit, 0, exit)
		conn.Send(wire.KindEvent, wire.VerbFSEntry, 0, &fsdelta.Entry{Path: "dryexec-hostile-x", Kind: fsdelta.EntryFile, Mode: 0o644, Size: 10})
		n := int64(11)
		if script == "hole of no bytes" {
			n = 0
		}
		conn.Send(wire.KindEvent, wire.VerbFSData, 0, nil, []byte("abc"))
		conn.Send(wire.KindEvent, wire.VerbFSHole, 0, &wire.FSHole{N: n})
	case "entry on an unknown mount":
		conn.Send(wire.KindEvent, wire.VerbTrialExit, 0, exit)
		conn.Send(wire.KindEvent, wire.VerbFSEntry, 0, &fsdelta.Entry{Mount: 7, Path: "x", Kind: fsdelta.EntryDir, Mode: 0o755})
	}
	conn.Send(wire.KindEvent, wire.VerbTrialDone, 0, &wire.TrialDone{})
	for {
		if _, err := conn.Read(); err != nil {
			return 0
		}
	}
}

// TestHostileGuest: a guest that breaks the protocol (one taken over by the
// command, say) gets the trial refused with ErrGuest, and no delta: the
// host does not take half a report. Each case is a guard in converse or
// ready that nothing else exercises.
func TestHostileGuest(t *testing.T) {
	requireNS(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct{ script, want string }{
		{"exit twice", "trial.exit twice"},
		{"entry before exit", "fs.entry before trial.exit"},
		{"done before exit", "trial.done before trial.exit"},
		{"entry escaping its mount", "../etc/shadow"},
		{"entry on an unknown mount", "mount"},
		{"hole longer than the file", "a hole of 11 bytes with 7 left"},
		{"hole of no bytes", "a hole of 0 bytes"},
		{"upper not a clean absolute path", "outside the planned mounts"},
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
			d, err := (&Rung{GuestExe: script}).Trial(ctx, dryexec.TrialSpec{Action: dryexec.Action{Argv: []string{"true"}, Cwd: dir, Env: testPath}})
			if !errors.Is(err, dryexec.ErrGuest) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want ErrGuest about %q", err, tc.want)
			}
			if d != nil {
				t.Fatalf("a delta from a guest that broke the protocol: %+v", d)
			}
		})
	}
}
