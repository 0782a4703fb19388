package rungcompare

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/session"
	"github.com/dryexec/dryexec/wire"
)

// SessionCase is one session both rungs run: its options, then commands in
// turn, each followed by a diff of the workspace.
type SessionCase struct {
	Name string
	// Opt are the session's options ({secrets} and {mock} in Masks and Net
	// are replaced as in Case.Args).
	Opt      session.Options
	Commands []string
	Timeout  time.Duration // each command's (0: none)
	// Rebase makes each diff the next one's baseline.
	Rebase bool
}

// SessionCases are the sessions of TestSessionSameAsNS: a workspace pushed
// from the fixture, then files of every kind, how commands end, what
// carries over from one to the next, masks, the network.
func SessionCases() []SessionCase {
	return []SessionCase{
		{Name: "files", Commands: []string{
			`echo new > a.txt; printf 'x\000y' > bin; echo more >> keep.txt; rm gone.txt; chmod 755 s.sh; mkdir -p d/e; ln -s keep.txt l; mv sub sub2; rm -r del`,
			`echo again > a.txt; chmod 600 keep.txt; rm l; touch d/e/f`,
		}},
		{Name: "files_rebased", Rebase: true, Commands: []string{
			`echo new > a.txt; mv sub sub2; rm -r del`,
			`echo again > a.txt; mv sub2 sub3; rm keep.txt`,
		}},
		{Name: "exit_and_output", Commands: []string{"echo out; echo err >&2; exit 3", "sh -c 'echo before; kill -TERM $$'; echo after=$?"}},
		{Name: "state_carries", Commands: []string{"mkdir -p x/y && cd x/y && export FOO=bar", "pwd; echo $FOO; echo here > f"}},
		{Name: "timeout", Timeout: 2 * time.Second, Commands: []string{"echo started; sleep 30", "echo next"}},
		{Name: "daemon", Commands: []string{"(sleep 60 > /dev/null 2>&1 &); echo left", "echo still"}},
		{Name: "not_found", Commands: []string{"no-such-command-dryexec; echo rc=$?"}},
		{Name: "mask", Opt: session.Options{Masks: []string{"{secrets}"}}, Commands: []string{"ls -a {secrets}; cat {secrets}/key | wc -c"}},
		{Name: "net_none", Commands: []string{
			"curl -sS -m 10 http://api.example.com/v1/ping; echo rc=$?; getent hosts api.example.com >/dev/null; echo dns=$?"}},
		{Name: "net_mock", Opt: session.Options{Net: []string{"mock:{mock}"}}, Commands: []string{
			"curl -sS -m 10 https://api.example.com/v1/ping; echo; curl -sS -m 10 -o /dev/null -w '%{http_code}' http://api.example.com/other; echo rc=$?"}},
	}
}

// SessionStep is what must be equal between two rungs after one command
// of a session: its result (but its duration and warnings: a rung names
// itself in them), the workspace's diff and the session's violations.
type SessionStep struct {
	Result     wire.ShellResult
	Diff       session.Diff
	Violations []dryexec.Violation
	Network    []dryexec.NetworkEvent
}

// SessionSameAsNS runs each case in a session on ns and one on name, each
// with the fixture's tree pushed as its workspace, and requires the same
// steps, field by field (timing aside).
func SessionSameAsNS(t *testing.T, name string, cases []SessionCase) {
	secrets := t.TempDir()
	os.WriteFile(filepath.Join(secrets, "key"), []byte("hunter2\n"), 0o600)
	mock := filepath.Join(t.TempDir(), "mock.yaml")
	os.WriteFile(mock, []byte("routes:\n  - host: api.example.com\n    path: /v1/ping\n    json: {pong: true}\n"), 0o644)
	repl := strings.NewReplacer("{secrets}", secrets, "{mock}", mock)
	for _, c := range cases {
		t.Run(c.Name, func(t *testing.T) {
			dir := Fixture(t, "files")
			run := func(r string) []SessionStep { return SessionSteps(t, r, c, dir, repl) }
			ns, other := run("ns"), run(name)
			if len(ns) != len(other) {
				t.Fatalf("%d steps on ns, %d on %s", len(ns), len(other), name)
			}
			for i := range ns {
				if !reflect.DeepEqual(ns[i], other[i]) {
					t.Errorf("step %d (%q) differs:\n%s", i, c.Commands[i], diffStep(ns[i], other[i], name))
				}
			}
		})
	}
}

// SessionSteps runs case c in a session on rung r with dir pushed as its
// workspace (repl replaces the placeholders of its options and commands)
// and returns its steps, timing aside.
func SessionSteps(t *testing.T, r string, c SessionCase, dir string, repl *strings.Replacer) []SessionStep {
	t.Helper()
	opt := c.Opt
	opt.Rung = r
	opt.Masks = replaceAll(repl, opt.Masks)
	opt.Net = replaceAll(repl, opt.Net)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	s, err := session.Open(ctx, opt)
	if err != nil {
		t.Fatalf("opening a %s session: %v", r, err)
	}
	defer s.Close()
	if err := s.PushDir(ctx, dir); err != nil {
		t.Fatalf("%s: pushing the fixture: %v", r, err)
	}
	var steps []SessionStep
	for _, cmd := range c.Commands {
		res, err := s.Shell(ctx, repl.Replace(cmd), c.Timeout)
		if err != nil {
			t.Fatalf("%s: %q: %v", r, cmd, err)
		}
		d, err := s.Diff(ctx, c.Rebase)
		if err != nil {
			t.Fatalf("%s: diff after %q: %v", r, cmd, err)
		}
		res.DurationNS, res.Warnings = 0, nil
		// The transcript merges two pipes in the order their bytes
		// reached the reader, and between two pipes no order is
		// defined (ns itself gave "err\nout\n" for `echo out; echo
		// err >&2` once under load): each rung's must be a merge of
		// its own stdout and stderr; the streams are compared apart.
		if !isMerge(res.Transcript, res.Stdout, res.Stderr) {
			t.Errorf("%s: %q: transcript %q is not a merge of stdout %q and stderr %q", r, cmd, res.Transcript, res.Stdout, res.Stderr)
		}
		res.Transcript = ""
		// The session's network log, filled on the host: the
		// exec's own events are res.Network.
		steps = append(steps, SessionStep{Result: *res, Diff: *d, Violations: s.Violations(), Network: s.Network()})
	}
	return steps
}

// isMerge reports whether m is an interleaving of a and b, each kept in
// its own order.
func isMerge(m, a, b string) bool {
	if len(m) != len(a)+len(b) {
		return false
	}
	// ok[j]: m[:i+j] is a merge of a[:i] and b[:j], for the current i.
	ok := make([]bool, len(b)+1)
	for i := 0; i <= len(a); i++ {
		for j := 0; j <= len(b); j++ {
			switch {
			case i == 0 && j == 0:
				ok[j] = true
			default:
				fromA := i > 0 && ok[j] && a[i-1] == m[i+j-1]
				fromB := j > 0 && ok[j-1] && b[j-1] == m[i+j-1]
				ok[j] = fromA || fromB
			}
		}
	}
	return ok[len(b)]
}

func replaceAll(r *strings.Replacer, ss []string) []string {
	var out []string
	for _, s := range ss {
		out = append(out, r.Replace(s))
	}
	return out
}

// diffStep lists the fields of two steps that differ, as JSON.
func diffStep(a, b SessionStep, bn string) string {
	var sb strings.Builder
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	for i := range va.NumField() {
		x, y := va.Field(i).Interface(), vb.Field(i).Interface()
		if reflect.DeepEqual(x, y) {
			continue
		}
		bx, _ := json.Marshal(x)
		by, _ := json.Marshal(y)
		fmt.Fprintf(&sb, "%s:\n  ns: %s\n  %s: %s\n", va.Type().Field(i).Name, bx, bn, by)
	}
	return sb.String()
}
