package cli

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/dryexec/dryexec/internal/testreq"
)

// TestBadInputExitCodes: every mistake a caller can make is a usage error
// (exit 2) or a refusal (exit 1) whose message says what to do, found before
// any trial runs or is stored; 125 is for dryexec's own faults only. Each of
// these exited 125 ("dryexec itself failed"), or ran, before.
func TestBadInputExitCodes(t *testing.T) {
	home, dir := t.TempDir(), t.TempDir()
	file := writeFile(t, dir, "plain-file", "x")
	badYAML := writeFile(t, dir, "bad.yaml", "routes: [\n")
	tests := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"unknown rung", []string{"run", "--rung", "bogus", "--", "true"}, ExitUsage, `--rung "bogus": unknown; choose one of`},
		{"empty argv", []string{"run", "--", ""}, ExitUsage, "no command: give it after --"},
		{"NUL in argv", []string{"run", "--", "echo", "a\x00b"}, ExitUsage, "NUL"},
		{"missing cwd", []string{"run", "-C", "/nonexistent/dir", "--", "true"}, ExitUsage, "not a directory on the host (it does not exist)"},
		{"relative missing cwd", []string{"run", "-C", "no/such/dir", "--", "true"}, ExitUsage, "does not exist"},
		{"cwd is a file", []string{"run", "-C", file, "--", "true"}, ExitUsage, "it is not a directory"},
		{"negative timeout", []string{"run", "--timeout", "-1s", "--", "true"}, ExitUsage, "--timeout -1s: must not be negative"},
		{"negative output cap", []string{"run", "--output-cap", "-1", "--", "true"}, ExitUsage, "--output-cap -1"},
		{"negative upper size", []string{"run", "--upper-size", "-1", "--", "true"}, ExitUsage, "--upper-size -1"},
		{"negative pids", []string{"run", "--pids", "-5", "--", "true"}, ExitUsage, "pids limits are -1"},
		{"NaN cpus", []string{"run", "--cpus", "NaN", "--", "true"}, ExitUsage, "not a number of CPUs"},
		{"bad memory", []string{"run", "--memory", "-5", "--", "true"}, ExitUsage, "is not a size"},
		{"malformed net", []string{"run", "--net", "bogus", "--", "true"}, ExitUsage, "want none, mock:FILE or allow:"},
		{"empty allow", []string{"run", "--net", "allow:", "--", "true"}, ExitUsage, "needs at least one"},
		{"allow everything", []string{"run", "--net", "allow:*", "--", "true"}, ExitUsage, "name the hosts"},
		{"bad port", []string{"run", "--net", "allow:example.com:99999", "--", "true"}, ExitUsage, "want 1-65535"},
		{"none then allow", []string{"run", "--net", "none", "--net", "allow:example.com:443", "--", "true"}, ExitUsage, "contradicts --net none"},
		{"allow then none", []string{"run", "--net", "allow:example.com:443", "--net", "none", "--", "true"}, ExitUsage, "none contradicts"},
		{"none then mock", []string{"run", "--net", "none", "--net", "mock:" + badYAML, "--", "true"}, ExitUsage, "contradicts --net none"},
		{"loopback rule", []string{"run", "--net", "allow:127.0.0.1:8080", "--", "true"}, ExitUsage, "the sandbox's own loopback"},
		{"localhost rule", []string{"run", "--net", "allow:localhost:5432", "--", "true"}, ExitUsage, "the sandbox's own loopback"},
		{"missing mock file", []string{"run", "--net", "mock:/nonexistent/mock.yaml", "--", "true"}, ExitUsage, "the mock file cannot be read"},
		{"mock file is a dir", []string{"run", "--net", "mock:" + dir, "--", "true"}, ExitUsage, "it is a directory"},
		{"malformed mock file", []string{"run", "--net", "mock:" + badYAML, "--", "true"}, ExitUsage, "bad.yaml"},
		{"two mock files", []string{"run", "--net", "mock:" + file, "--net", "mock:" + file, "--", "true"}, ExitUsage, "only one mock file"},
		{"missing policy", []string{"run", "--policy", "/nonexistent.yaml", "--", "true"}, ExitUsage, "invalid policy"},
		{"--force without --commit", []string{"run", "--force", "--", "true"}, ExitUsage, "add one, or drop --force"},
		{"--commit with --no-store", []string{"run", "--commit", "--no-store", "--", "true"}, ExitUsage, "drop --no-store"},
		{"no command at all", []string{"run"}, ExitUsage, "no command: give it after --"},
		{"unknown flag", []string{"run", "--bogus", "--", "true"}, ExitUsage, "unknown flag"},
		{"unknown subcommand", []string{"frobnicate"}, ExitUsage, "unknown command"},
		{"unknown trial id", []string{"commit", "tr_aaaaaaaaaaaaaaaaaaaa"}, ExitRefused, "trial not found"},
		{"not a trial id", []string{"commit", "../../etc"}, ExitRefused, "is not a trial id"},
		{"show unknown", []string{"show", "tr_aaaaaaaaaaaaaaaaaaaa"}, ExitRefused, "trial not found"},
		{"discard unknown", []string{"discard", "nonsense"}, ExitRefused, "not a trial id"},
		{"verify unknown", []string{"verify", "tr_aaaaaaaaaaaaaaaaaaaa"}, ExitRefused, "does not verify"},
		{"policy test missing file", []string{"policy", "test", "/nonexistent.json"}, ExitUsage, "nonexistent"},
		{"serve both", []string{"serve", "--socket", "/tmp/x", "--listen", "127.0.0.1:0"}, ExitUsage, "choose one"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errs := cli(t, home, tt.args...)
			if code != tt.code || !strings.Contains(errs, tt.msg) {
				t.Fatalf("exit %d, want %d with %q; stderr:\n%s", code, tt.code, tt.msg, errs)
			}
			if strings.Contains(errs, "panic") || strings.Contains(errs, "goroutine ") {
				t.Fatalf("a panic: %s", errs)
			}
		})
	}
	// None of those cost a trial.
	if ents, _ := os.ReadDir(filepath.Join(home, "trials")); len(ents) != 0 {
		t.Errorf("bad input left %d trials in the store", len(ents))
	}
}

// TestCommitPathNotInTrial: naming a path the trial did not change is a
// usage error that says what it did change, and commits nothing.
func TestCommitPathNotInTrial(t *testing.T) {
	requireNS(t)
	home, dir := t.TempDir(), t.TempDir()
	code, out, errs := cli(t, home, "run", "--json", "-C", dir, "--", "sh", "-c", "echo a > a")
	if code != 0 {
		t.Fatalf("run: %d %s", code, errs)
	}
	id := decode(t, out).TrialID
	for _, p := range []string{filepath.Join(dir, "b"), "/etc", filepath.Join(dir, "a-longer")} {
		code, _, errs = cli(t, home, "commit", id, p)
		if code != ExitUsage || !strings.Contains(errs, "changed nothing at or beneath "+p) || !strings.Contains(errs, filepath.Join(dir, "a")) {
			t.Fatalf("commit %s: exit %d, want %d; stderr %s", p, code, ExitUsage, errs)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "a")); err == nil {
		t.Fatal("a refused commit changed the host")
	}
	if code, _, errs = cli(t, home, "commit", id, filepath.Join(dir, "a")); code != 0 {
		t.Fatalf("the trial could not be committed after the refusals: %d %s", code, errs)
	}
}

// TestRunCommitRefusedExits1: `run --commit` that the decision holds back
// exits 1, as the README says, and a blocked trial's summary offers no commit
// command.
func TestRunCommitRefusedExits1(t *testing.T) {
	requireNS(t)
	home := t.TempDir()
	for _, tt := range []struct {
		name, script string
		choice       string
	}{
		{"review", "echo a > a; exit 3", "review"},
		{"block", "echo a > a; mkdir -p /etc/dryexec-test-block && echo x > /etc/dryexec-test-block/x", "block"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			code, out, errs := cli(t, home, "run", "--commit", "-C", dir, "--", "sh", "-c", tt.script)
			if code != ExitRefused || !strings.Contains(errs, "not committing") || !strings.Contains(out, "decision: "+tt.choice) {
				t.Fatalf("exit %d, want %d; stdout:\n%s\nstderr:\n%s", code, ExitRefused, out, errs)
			}
			if _, err := os.Stat(filepath.Join(dir, "a")); err == nil {
				t.Fatal("a refused --commit changed the host")
			}
			hasCommit := strings.Contains(out, "commit: dryexec commit ")
			if hasCommit != (tt.choice != "block") {
				t.Fatalf("summary offers the commit command: %v (decision %s):\n%s", hasCommit, tt.choice, out)
			}
		})
	}
	if _, err := os.Stat("/etc/dryexec-test-block"); err == nil {
		t.Fatal("a blocked trial reached /etc")
	}
}

// TestNetSpecsContradictionRefusedBeforeRun: --net none and an allow rule,
// in the order that used to run and reach the allowed host, never runs.
func TestNetSpecsContradictionRefusedBeforeRun(t *testing.T) {
	requireNS(t)
	home, dir := t.TempDir(), t.TempDir()
	code, out, errs := cli(t, home, "run", "-C", dir, "--net", "none", "--net", "allow:example.com:443", "--", "sh", "-c", "echo ran > ran")
	if code != ExitUsage || out != "" || !strings.Contains(errs, "contradicts --net none") {
		t.Fatalf("exit %d; stdout %q; stderr %s", code, out, errs)
	}
}

// TestDaemonListenerUnreachable: while a daemon of this install serves TCP,
// `dryexec run` refuses a rule that reaches its listener (any address form),
// and the daemon's token is masked in every trial.
func TestDaemonListenerUnreachable(t *testing.T) {
	requireNS(t)
	home, dir := t.TempDir(), t.TempDir()
	ln, err := net.Listen("tcp", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	if err := os.MkdirAll(filepath.Join(home, "serve"), 0o700); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(home, "serve"), "listen", ln.Addr().String()+"\n")
	writeFile(t, filepath.Join(home, "serve"), "token", "s3cret-token\n")
	var local string
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
			local = ipn.IP.String()
		}
	}
	if local == "" {
		testreq.Needf(t, testreq.Kernel, "non-loopback IPv4 address", errors.New("none on this host to name in a rule"))
	}
	for _, spec := range []string{
		fmt.Sprintf("allow:%s:%d", local, port),
		"allow:" + local, // any port
		fmt.Sprintf("allow:example.com,%s:%d", local, port),
	} {
		code, _, errs := cli(t, home, "run", "-C", dir, "--net", spec, "--", "true")
		if code != ExitUsage || !strings.Contains(errs, "would reach the dryexec daemon listening on "+ln.Addr().String()) {
			t.Errorf("--net %s: exit %d; stderr %s", spec, code, errs)
		}
	}
	// Another port of the same host is fine (the rule is refused for its
	// loopback-free form only if it reaches the daemon).
	if code, _, errs := cli(t, home, "run", "--no-store", "-C", dir, "--net", fmt.Sprintf("allow:%s:%d", local, port+1), "--", "true"); code == ExitUsage {
		t.Errorf("a rule for another port was refused: %s", errs)
	}
	// The token is not readable in a trial.
	code, out, errs := cli(t, home, "run", "--json", "-C", dir, "--", "sh", "-c", "cat "+filepath.Join(home, "serve", "token")+" || true")
	if code == ExitInternal || code == ExitUsage {
		t.Fatalf("exit %d: %s", code, errs)
	}
	if strings.Contains(decode(t, out).Process.Stdout, "s3cret") {
		t.Fatal("a trial read the daemon's bearer token")
	}
}

// TestNoPanicOnArgumentCombinations throws combinations of valid and broken
// arguments at every subcommand: whatever they are, dryexec never panics and
// never blames itself (125) for the caller's input.
func TestNoPanicOnArgumentCombinations(t *testing.T) {
	requireNS(t)
	home, dir := t.TempDir(), t.TempDir()
	mock := writeFile(t, dir, "m.yaml", "routes: [{host: a.example, body: x}]\n")
	rnd := rand.New(rand.NewPCG(1, 2))
	pick := func(xs []string) string { return xs[rnd.IntN(len(xs))] }
	values := []string{"", "-", "--", "0", "-1", "x", "\x00", "/", "/nonexistent", "..", "tr_aaaaaaaaaaaaaaaaaaaa", "NaN", "1e309", "99999999999999999999", dir, mock}
	flags := map[string][]string{
		"run":         {"--rung", "--timeout", "--env", "--pass-env", "--memory", "--pids", "--cpus", "--mask", "--net", "--output-cap", "--upper-size", "-C", "--policy", "--json", "--no-store", "--stdin", "--no-default-masks", "--commit", "--force", "-i"},
		"show":        {"--json", "--network"},
		"ls":          {},
		"commit":      {"--force", "--force-path"},
		"discard":     {},
		"verify":      {},
		"policy show": {},
		"policy test": {"--policy", "--json"},
		"doctor":      {"--json"},
	}
	netValues := []string{"none", "mock:" + mock, "mock:", "mock:/nonexistent", "allow:", "allow:a.example", "allow:a.example:0", "allow:[::1", "allow:127.0.0.1", "allow:*.example.com/p", "allow:,,,"}
	subs := slices.Sorted(maps.Keys(flags)) // one order: the same combinations every run
	for _, sub := range subs {
		fl := flags[sub]
		for i := 0; i < 25; i++ {
			args := strings.Fields(sub)
			for n := rnd.IntN(5); n > 0 && len(fl) > 0; n-- {
				f := pick(fl)
				args = append(args, f)
				switch f {
				case "--json", "--network", "--no-store", "--stdin", "--no-default-masks", "--commit", "--force", "-i":
				case "--net":
					args = append(args, pick(netValues))
				default:
					args = append(args, pick(values))
				}
			}
			for n := rnd.IntN(3); n > 0; n-- {
				args = append(args, pick(values))
			}
			if sub == "run" && rnd.IntN(2) == 0 {
				args = append(args, "--", "true")
			}
			t.Run(fmt.Sprintf("%s/%d", sub, i), func(t *testing.T) {
				defer func() {
					if r := recover(); r != nil {
						t.Fatalf("panic on %q: %v", args, r)
					}
				}()
				code, _, errs := cli(t, home, args...)
				if code == ExitInternal {
					t.Fatalf("%q: exit 125 for the caller's input: %s", args, errs)
				}
			})
		}
	}
}

// TestRunCommitPersistenceFromHome: the red team's case end to end — from
// $HOME, `run --commit` of writes where code runs later is refused (exit 1)
// with a reason naming the place, and the host keeps none of them.
func TestRunCommitPersistenceFromHome(t *testing.T) {
	requireNS(t)
	store, home := t.TempDir(), t.TempDir()
	env := map[string]string{"DRYEXEC_HOME": store, "HOME": home, "PATH": home + "/.cargo/bin:/usr/local/bin:/usr/bin:/bin", "NO_COLOR": "1"}
	for _, tt := range []struct{ script, file, class string }{
		{"mkdir -p .local/bin && printf '#!/bin/sh\\n' > .local/bin/sudo", ".local/bin/sudo", "directory on PATH"},
		{"printf '[core]\\n\\tfsmonitor = /tmp/x\\n' > .gitconfig", ".gitconfig", "git config or hook"},
		{"echo 'curl x | sh' > .bash_login", ".bash_login", "shell startup file"},
		{"mkdir -p .config/systemd/user && echo '[Service]' > .config/systemd/user/x.service", ".config/systemd/user/x.service", "systemd unit"},
		{"mkdir -p .config/autostart && echo '[Desktop Entry]' > .config/autostart/x.desktop", ".config/autostart/x.desktop", "desktop autostart entry"},
		{"echo 'export X=1' > .envrc", ".envrc", "direnv file"},
		{"echo 'x' > .xsessionrc", ".xsessionrc", "X session file"},
		{"mkdir -p .cargo/bin && echo x > .cargo/bin/ls", ".cargo/bin/ls", "PATH"},
	} {
		t.Run(tt.file, func(t *testing.T) {
			var out, errb strings.Builder
			code := Run(t.Context(), []string{"run", "--commit", "-C", home, "--", "sh", "-c", tt.script},
				Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }})
			if code != ExitRefused || !strings.Contains(out.String(), tt.class) || !strings.Contains(out.String(), filepath.Join(home, tt.file)) {
				t.Fatalf("exit %d (want %d); stdout:\n%s\nstderr:\n%s", code, ExitRefused, out.String(), errb.String())
			}
			if _, err := os.Stat(filepath.Join(home, tt.file)); err == nil {
				t.Fatal("committed to the host")
			}
		})
	}
}

// TestCommitForceOverridesBlock: `dryexec commit` refuses a blocked trial
// with what to do, and `--force` (a person decided) commits it, recorded.
func TestCommitForceOverridesBlock(t *testing.T) {
	requireNS(t)
	home, dir := t.TempDir(), t.TempDir()
	pol := writeFile(t, t.TempDir(), "p.yaml", "rules: [{name: no, expr: 'true', result: block, reason: never}]\n")
	code, out, errs := cli(t, home, "run", "--json", "--policy", pol, "-C", dir, "--", "sh", "-c", "echo a > a")
	if code != ExitBlock {
		t.Fatalf("run: %d %s", code, errs)
	}
	id := decode(t, out).TrialID
	code, _, errs = cli(t, home, "commit", id)
	if code != ExitRefused || !strings.Contains(errs, "dryexec commit --force "+id) {
		t.Fatalf("commit of a blocked trial: exit %d; stderr %s", code, errs)
	}
	if _, err := os.Stat(filepath.Join(dir, "a")); err == nil {
		t.Fatal("a refused commit changed the host")
	}
	if code, _, errs = cli(t, home, "commit", "--force", id); code != 0 {
		t.Fatalf("commit --force: %d %s", code, errs)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "a")); err != nil || string(b) != "a\n" {
		t.Fatalf("commit --force did not commit: %q %v", b, err)
	}
	if _, out, _ = cli(t, home, "show", id); !strings.Contains(out, "override: decided block") {
		t.Fatalf("the override is not shown:\n%s", out)
	}
}
