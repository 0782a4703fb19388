package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/policy"
	"github.com/dryexec/dryexec/receipt"
	"github.com/dryexec/dryexec/schema"
)

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func reasonsContain(d *dryexec.StateDelta, s string) bool {
	return strings.Contains(strings.Join(d.Decision.Reasons, "\n"), s)
}

// TestPolicyBuildOnly: a policy that allows only <dir>/build/** blocks a real
// trial writing <dir>/src/x (and --commit leaves the host alone), and
// auto-commits one writing <dir>/build/x (and --commit applies it).
func TestPolicyBuildOnly(t *testing.T) {
	requireNS(t)
	home := t.TempDir()
	for _, form := range []struct{ name, pattern string }{{"absolute", ""}, {"relative", "./build/**"}} {
		t.Run(form.name, func(t *testing.T) {
			dir := t.TempDir()
			pattern := form.pattern
			if pattern == "" {
				pattern = dir + "/build/**"
			}
			pol := writeFile(t, t.TempDir(), "policy.yaml", "name: build-only\nallowed_mutation_targets: ['"+pattern+"']\n")

			code, out, errs := cli(t, home, "run", "--json", "--commit", "--policy", pol, "-C", dir, "--", "sh", "-c", "mkdir -p src && echo x > src/x")
			d := decode(t, out)
			// --commit refused: exit 1 (README), the decision is in the delta.
			if code != ExitRefused || d.Decision.Choice != "block" || !reasonsContain(d, "changes outside the allowed targets ("+pattern+"): "+dir+"/src") {
				t.Fatalf("src/x: exit %d, %+v\n%s", code, d.Decision, errs)
			}
			if !strings.Contains(errs, "not committing") {
				t.Errorf("stderr %q", errs)
			}
			if _, err := os.Stat(filepath.Join(dir, "src")); err == nil {
				t.Fatal("a blocked trial reached the host")
			}
			// Committing it by name is refused too, and changes nothing...
			if code, _, errs := cli(t, home, "commit", d.TrialID); code != ExitRefused || !strings.Contains(errs, "decided block") ||
				!strings.Contains(errs, "explicit override") {
				t.Fatalf("commit of a blocked trial: %d %q", code, errs)
			}
			if _, err := os.Stat(filepath.Join(dir, "src")); err == nil {
				t.Fatal("dryexec commit ID committed a blocked trial")
			}
			if _, out, _ := cli(t, home, "show", d.TrialID); !strings.Contains(out, "status: pending") {
				t.Errorf("show after the refusal:\n%s", out)
			}
			// ...unless a person overrides the block, which the trial records.
			if code, _, errs := cli(t, home, "commit", "--allow-blocked", d.TrialID); code != 0 || !strings.Contains(errs, "was decided block; committed because you asked") {
				t.Fatalf("commit --allow-blocked of a blocked trial: %d %q", code, errs)
			}
			if _, err := os.Stat(filepath.Join(dir, "src", "x")); err != nil {
				t.Fatal("dryexec commit --allow-blocked ID did not commit")
			}
			if _, out, _ := cli(t, home, "show", d.TrialID); !strings.Contains(out, "override: decided block, committed anyway by root (uid 0) at ") {
				t.Errorf("show does not tell the override:\n%s", out)
			}

			code, out, errs = cli(t, home, "run", "--json", "--commit", "--policy", pol, "-C", dir, "--", "sh", "-c", "mkdir -p build && echo x > build/x")
			d = decode(t, out)
			if code != 0 || d.Decision.Choice != "auto_commit" {
				t.Fatalf("build/x: exit %d, %+v\n%s", code, d.Decision, errs)
			}
			if b, err := os.ReadFile(filepath.Join(dir, "build", "x")); err != nil || string(b) != "x\n" {
				t.Fatalf("auto_commit did not commit: %q %v", b, err)
			}

			// --force commits a blocked trial: a person decided.
			code, _, errs = cli(t, home, "run", "--commit", "--force", "--policy", pol, "-C", dir, "--", "sh", "-c", "mkdir -p src && echo y > src/y")
			if code != ExitBlock {
				t.Fatalf("forced: exit %d %s", code, errs)
			}
			if b, err := os.ReadFile(filepath.Join(dir, "src", "y")); err != nil || string(b) != "y\n" {
				t.Fatalf("--force did not commit: %v", err)
			}
		})
	}
}

// TestPolicyRulesEndToEnd: CEL rules decide a real trial, and the network
// rule of the acceptance (`size(delta.network) > 0` → review) decides that
// trial's delta once it has network entries (netsim fills them in real runs).
func TestPolicyRulesEndToEnd(t *testing.T) {
	requireNS(t)
	dir, home := t.TempDir(), t.TempDir()
	pol := writeFile(t, t.TempDir(), "policy.json", `{
  "rules": [
    {"name": "network", "expr": "size(delta.network) > 0", "result": "review", "reason": "the action used the network"},
    {"name": "sql", "expr": "delta.files.exists(f, f.path.endsWith('.sql'))", "result": "review", "reason": "a migration needs a person"},
    {"name": "shout", "expr": "delta.process.stdout.contains('DROP TABLE')", "result": "block", "reason": "it talks about dropping tables"}
  ]}`)
	tests := []struct {
		name   string
		script string
		code   int
		choice string
		reason string
	}{
		{"quiet", "echo x > a.txt", 0, "auto_commit", "info: nothing needs a person"},
		{"sql file", "echo 'select 1;' > m.sql", ExitReview, "review", "review: rule sql: a migration needs a person"},
		{"stdout", "echo DROP TABLE users", ExitBlock, "block", "block: rule shout: it talks about dropping tables"},
		{"failed command", "echo x > a.txt; exit 7", ExitCommandFailed, "review", "review: the command failed: exit code 7"},
	}
	var quiet *dryexec.StateDelta
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := cli(t, home, "run", "--json", "--policy", pol, "-C", dir, "--", "sh", "-c", tt.script)
			d := decode(t, out)
			if code != tt.code || d.Decision.Choice != tt.choice || !reasonsContain(d, tt.reason) {
				t.Fatalf("exit %d (want %d), %+v\n%s", code, tt.code, d.Decision, errs)
			}
			if tt.name == "quiet" {
				quiet = d
			}
		})
	}
	if quiet == nil {
		t.Fatal("no quiet trial")
	}
	// The network rule, through the CLI, on that real trial's delta with the
	// network entry netsim would log.
	quiet.Network = []dryexec.NetworkEvent{{Proto: "https", Method: "GET", URL: "https://api.example.com/v1", Host: "api.example.com", Port: 443, Status: 200, Action: "mocked"}}
	b, _ := json.Marshal(quiet)
	withNet := writeFile(t, t.TempDir(), "delta.json", string(b))
	code, out, errs := cli(t, home, "policy", "test", "--policy", pol, withNet)
	if code != ExitReview || !strings.Contains(out, "decision: review") || !strings.Contains(out, "review: rule network: the action used the network") {
		t.Fatalf("policy test with a network entry: %d\n%s%s", code, out, errs)
	}
	// The same trial as stored, without network: auto_commit, under the same policy.
	if code, out, errs := cli(t, home, "policy", "test", "--json", "--policy", pol, quiet.TrialID); code != 0 || !strings.Contains(out, `"choice": "auto_commit"`) {
		t.Fatalf("policy test of the stored trial: %d\n%s%s", code, out, errs)
	}
}

func TestPolicyShowAndTest(t *testing.T) {
	home := t.TempDir()
	code, out, errs := cli(t, home, "policy", "show")
	if code != 0 {
		t.Fatalf("policy show: %d %s", code, errs)
	}
	p, err := policy.Parse([]byte(out))
	if err != nil || !reflect.DeepEqual(p, policy.Default()) {
		t.Fatalf("policy show does not print the default policy: %v\n%s", err, out)
	}
	pol := writeFile(t, t.TempDir(), "p.yaml", "allowed_mutation_targets: [/w/build/**]\n")
	if code, out, _ := cli(t, home, "policy", "show", pol); code != 0 || !strings.Contains(out, `"/w/build/**"`) || !strings.Contains(out, `"/etc/**"`) {
		t.Fatalf("policy show FILE: %d\n%s", code, out)
	}
	bad := writeFile(t, t.TempDir(), "bad.yaml", "rules: [{name: a, expr: 'delta.nope', result: block}]")
	if code, _, errs := cli(t, home, "policy", "show", bad); code != ExitUsage || !strings.Contains(errs, "invalid policy") {
		t.Fatalf("policy show of a bad file: %d %s", code, errs)
	}
	// Sandbox-controlled text in a reason never reaches the terminal raw.
	d := &dryexec.StateDelta{Action: dryexec.Action{Cwd: "/w"},
		Files: []dryexec.FileChange{{Path: "/w/src/\x1b]0;owned\x07x", Op: dryexec.OpCreate, Kind: dryexec.KindFile, Size: 1, Mode: "0644"}}}
	b, _ := json.Marshal(d)
	code, out, errs = cli(t, home, "policy", "test", "--policy", pol, writeFile(t, t.TempDir(), "d.json", string(b)))
	if code != ExitBlock || strings.ContainsAny(out, "\x1b\x07") || !strings.Contains(out, `\x1b]0;owned\a`) {
		t.Fatalf("policy test: %d %q %s", code, out, errs)
	}
	if code, _, _ := cli(t, home, "policy", "test", writeFile(t, t.TempDir(), "x.json", "[1]")); code != ExitUsage {
		t.Fatalf("policy test of a non-delta: %d", code)
	}
}

func TestBadPolicyFile(t *testing.T) {
	requireNS(t)
	home := t.TempDir()
	for name, doc := range map[string]string{
		"typo":     "alowed_mutation_targets: ['*']",
		"bad rule": "rules: [{name: a, expr: 'delta.nope', result: block}]",
		"not yaml": "rules: [",
	} {
		pol := writeFile(t, t.TempDir(), "p.yaml", doc)
		code, _, errs := cli(t, home, "run", "--policy", pol, "--", "sh", "-c", "echo ran > /tmp/should-not-run")
		if code != ExitUsage || !strings.Contains(errs, "invalid policy") {
			t.Errorf("%s: exit %d %q", name, code, errs)
		}
	}
	if ents, _ := os.ReadDir(filepath.Join(home, "trials")); len(ents) != 0 {
		t.Errorf("a bad policy still cost a trial: %v", ents)
	}
}

// TestReceipts: run signs; show prints the reasons and the receipt; verify
// accepts the stored trial and its JSON, and refuses every tampered form.
func TestReceipts(t *testing.T) {
	requireNS(t)
	dir, home := t.TempDir(), t.TempDir()
	code, out, errs := cli(t, home, "run", "--json", "-C", dir, "--", "sh", "-c", "echo hi > x.txt; echo y > /tmp/outside.$$")
	if code != ExitReview {
		t.Fatalf("run: %d %s", code, errs)
	}
	d := decode(t, out)
	if err := schema.Validate([]byte(out)); err != nil {
		t.Fatalf("a decided, signed delta breaks the contract: %v", err)
	}
	if d.Receipt.Signature == "" || !strings.HasPrefix(d.Receipt.KeyID, "ed25519:") {
		t.Fatalf("no receipt: %+v", d.Receipt)
	}
	st, err := os.Stat(filepath.Join(home, receipt.KeyFile))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("install key: %v %v", st, err)
	}

	code, show, _ := cli(t, home, "show", d.TrialID)
	if code != 0 || !strings.Contains(show, "decision: review") || !strings.Contains(show, "changes outside the working directory") ||
		!strings.Contains(show, "receipt: signed by "+d.Receipt.KeyID) {
		t.Fatalf("show: %d\n%s", code, show)
	}
	if code, ls, _ := cli(t, home, "ls"); code != 0 || !strings.Contains(ls, "DECISION") || !strings.Contains(ls, "review") {
		t.Errorf("ls: %d\n%s", code, ls)
	}
	if code, out, errs := cli(t, home, "verify", d.TrialID); code != 0 || !strings.Contains(out, "receipt verifies") {
		t.Fatalf("verify stored: %d %s %s", code, out, errs)
	}
	good := writeFile(t, t.TempDir(), "delta.json", out)
	if code, _, errs := cli(t, home, "verify", good); code != 0 {
		t.Fatalf("verify file: %d %s", code, errs)
	}

	tamper := func(f func(*dryexec.StateDelta)) string {
		var c dryexec.StateDelta
		json.Unmarshal([]byte(out), &c)
		f(&c)
		b, _ := json.Marshal(&c)
		return writeFile(t, t.TempDir(), "delta.json", string(b))
	}
	otherHome := t.TempDir()
	cli(t, otherHome, "run", "--no-store", "--", "true") // another install, another key
	tests := []struct {
		name string
		args []string
		err  string
	}{
		{"path changed", []string{"verify", tamper(func(c *dryexec.StateDelta) { c.Files[0].Path = "/etc/cron.d/x" })}, "changed after it was signed"},
		{"decision upgraded", []string{"verify", tamper(func(c *dryexec.StateDelta) { c.Decision.Choice = "auto_commit" })}, "changed after it was signed"},
		{"receipt removed", []string{"verify", tamper(func(c *dryexec.StateDelta) { c.Receipt = dryexec.Receipt{} })}, "has no receipt"},
		{"another install's key", []string{"verify", "--key", filepath.Join(otherHome, receipt.PublicKeyFile), good}, "signed by another key"},
		{"not a delta", []string{"verify", writeFile(t, t.TempDir(), "x.json", "[1,2]")}, "malformed"},
		{"unknown trial", []string{"verify", "tr_aaaaaaaaaaaaaaaaaaaa"}, "trial not found"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, errs := cli(t, home, tt.args...)
			if code != ExitRefused || !strings.Contains(errs, tt.err) {
				t.Fatalf("exit %d, %q; want %d and %q", code, errs, ExitRefused, tt.err)
			}
		})
	}
	if code, _, errs := cli(t, home, "verify", "--key", filepath.Join(otherHome, receipt.PublicKeyFile), "--", "/no/such/file"); code != ExitUsage {
		t.Errorf("missing file: %d %s", code, errs)
	}

	// Tampering with the stored trial itself is caught too.
	stored := filepath.Join(home, "trials", d.TrialID, "delta.json")
	b, _ := os.ReadFile(stored)
	os.WriteFile(stored, []byte(strings.Replace(string(b), `"choice": "review"`, `"choice": "auto_commit"`, 1)), 0o600)
	if code, _, errs := cli(t, home, "verify", d.TrialID); code != ExitRefused || !strings.Contains(errs, "changed after it was signed") {
		t.Fatalf("tampered store: %d %s", code, errs)
	}
}

// TestReceiptKeyHiddenFromTrials: the sandbox sees the host's files, but not
// the install's signing key — a command that could read it could forge a
// receipt for any delta.
func TestReceiptKeyHiddenFromTrials(t *testing.T) {
	requireNS(t)
	dir, home := t.TempDir(), t.TempDir()
	if code, _, errs := cli(t, home, "run", "--no-store", "--", "true"); code != 0 { // creates the key
		t.Fatalf("first run: %d %s", code, errs)
	}
	keyFile := filepath.Join(home, receipt.KeyFile)
	key, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	code, out, errs := cli(t, home, "run", "--json", "-C", dir, "--", "sh", "-c",
		"cat "+keyFile+"; cp "+keyFile+" stolen.pem; base64 "+keyFile)
	d := decode(t, out)
	if strings.Contains(d.Process.Stdout, "PRIVATE KEY") || strings.Contains(d.Process.Stdout, strings.Split(string(key), "\n")[1]) {
		t.Fatalf("the trial read the signing key:\n%s", d.Process.Stdout)
	}
	sum := sha256.Sum256(key)
	for _, f := range d.Files {
		if f.SHA256 == hex.EncodeToString(sum[:]) {
			t.Fatalf("the trial copied the signing key to %s", f.Path)
		}
	}
	if code == 0 {
		t.Errorf("reading a masked key was auto-committed: %+v\n%s", d.Decision, errs)
	}
}
