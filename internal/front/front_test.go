package front

import (
	"os"
	"os/exec"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec/policy"
)

// TestParseRun: the front takes only what it can send exactly as the
// engine would; anything else — other commands, other flags, no `--`, a
// value the engine would refuse — is the engine's.
func TestParseRun(t *testing.T) {
	for _, tc := range []struct {
		args string
		ok   bool
		want runArgs
	}{
		{"run -- /bin/true", true, runArgs{exitStatus: "decision", argv: []string{"/bin/true"}}},
		{"run --json -q --no-store --via daemon -- make test", true,
			runArgs{via: "daemon", exitStatus: "decision", asJSON: true, quiet: true, noStore: true, argv: []string{"make", "test"}}},
		{"run --via=auto --quiet --exit-status command -C /tmp --timeout 1.5s --env A=1 --env B --pass-env C* -- ls -la", true,
			runArgs{via: "auto", cwd: "/tmp", exitStatus: "command", quiet: true, timeout: 1500 * time.Millisecond,
				set: []string{"A=1"}, pass: []string{"B", "C*"}, argv: []string{"ls", "-la"}}},
		{"run --cwd=/x --exit-status=decision -- a --json", true, runArgs{cwd: "/x", exitStatus: "decision", argv: []string{"a", "--json"}}},
		{"run /bin/true", false, runArgs{}},                // no --: cobra reads flags among the command's words
		{"run --rung best -- /bin/true", false, runArgs{}}, // a flag the front does not know
		{"run --commit -- /bin/true", false, runArgs{}},
		{"run -i -- /bin/true", false, runArgs{}},
		{"run --policy p.yaml -- /bin/true", false, runArgs{}},
		{"run --stdin -- cat", false, runArgs{}},
		{"run --exit-status nope -- /bin/true", false, runArgs{}}, // the engine's usage error
		{"run --timeout -1s -- /bin/true", false, runArgs{}},
		{"run --timeout soon -- /bin/true", false, runArgs{}},
		{"run --json=false -- /bin/true", false, runArgs{}},
		{"run --", false, runArgs{}},
		{"run --via", false, runArgs{}},
		{"show tr_x", false, runArgs{}},
		{"--help", false, runArgs{}},
		{"run --help -- x", false, runArgs{}},
	} {
		t.Run(tc.args, func(t *testing.T) {
			got, ok := parseRun(strings.Fields(tc.args))
			if ok != tc.ok {
				t.Fatalf("handled %v, want %v", ok, tc.ok)
			}
			if ok && !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("got %+v\nwant %+v", got, tc.want)
			}
		})
	}
	if _, ok := parseRun([]string{"run", "--", "a\x00b"}); ok {
		t.Error("an argument with a NUL byte is the engine's to refuse")
	}
}

// TestRunStatusChoices: the front names the policy's choices as the policy
// does.
func TestRunStatusChoices(t *testing.T) {
	if policy.AutoCommit != "auto_commit" || policy.Block != "block" {
		t.Fatalf("policy choices renamed (%q, %q): update RunStatus", policy.AutoCommit, policy.Block)
	}
}

// TestFrontLinksLittle: the front's binary links none of the engine's heavy
// packages, whose initialisation is what it exists to avoid.
func TestFrontLinksLittle(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/dryexec/dryexec/cmd/dryexec-front").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v %s", err, out)
	}
	allowed := map[string]bool{"github.com/dryexec/dryexec": true, "github.com/dryexec/dryexec/internal/apiclient": true,
		"github.com/dryexec/dryexec/internal/front": true, "github.com/dryexec/dryexec/render": true,
		"github.com/dryexec/dryexec/cmd/dryexec-front": true, "golang.org/x/sys/unix": true,
		"github.com/mattn/go-isatty": true, "github.com/mattn/go-colorable": true, "github.com/fatih/color": true}
	// Of the standard library, net/http is left out (apiclient speaks
	// HTTP/1.1 itself): it brings crypto/tls, x509 and HTTP/2, their
	// initialisation and a goroutine pair per connection.
	heavy := map[string]bool{"net/http": true, "crypto/tls": true, "crypto/x509": true}
	for _, dep := range strings.Fields(string(out)) {
		if heavy[dep] {
			t.Errorf("cmd/dryexec-front links %s", dep)
		}
		if first, _, _ := strings.Cut(dep, "/"); !strings.Contains(first, ".") || strings.HasPrefix(dep, "vendor/") {
			continue // the standard library
		}
		if !allowed[dep] {
			t.Errorf("cmd/dryexec-front links %s", dep)
		}
	}
}

// TestEngine: DRYEXEC_ENGINE, else dryexec-engine beside the front (through
// symlinks to it); a missing engine says what to do.
func TestEngine(t *testing.T) {
	dir := t.TempDir()
	front := dir + "/dryexec"
	for _, f := range []string{front, dir + "/" + EngineName} {
		if err := os.WriteFile(f, nil, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	link := t.TempDir() + "/dryexec"
	if err := os.Symlink(front, link); err != nil {
		t.Fatal(err)
	}
	none := func(string) string { return "" }
	for _, tc := range []struct {
		name   string
		getenv func(string) string
		exe    string
		want   string
	}{
		{"beside", none, front, dir + "/" + EngineName},
		{"through a symlink", none, link, dir + "/" + EngineName},
		{"env", func(k string) string { return map[string]string{"DRYEXEC_ENGINE": "/opt/e"}[k] }, front, "/opt/e"},
		{"missing", none, t.TempDir() + "/dryexec", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Engine(tc.getenv, func() (string, error) { return tc.exe, nil })
			if tc.want == "" {
				if err == nil || !strings.Contains(err.Error(), "make build") {
					t.Fatalf("got %q, %v; want an error saying make build", got, err)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("got %q, %v; want %q", got, err, tc.want)
			}
		})
	}
}
