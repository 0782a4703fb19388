package linuxns

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
)

// fakeHome makes a home with credentials, points HOME at it (the masks are
// resolved from the host process's HOME), and returns it.
func fakeHome(t *testing.T) string {
	t.Helper()
	home := t.TempDir()
	files := map[string]string{
		".ssh/id_rsa":         "-----BEGIN OPENSSH PRIVATE KEY----- SECRET",
		".ssh/known_hosts":    "host ssh-ed25519 AAAA",
		".aws/credentials":    "[default]\naws_secret_access_key = SECRET",
		".kube/cache/x/token": "SECRET",
		".netrc":              "machine x login y password SECRET",
		"docker-real.json":    `{"auths": {"x": {"auth": "SECRET"}}}`,
		"project.key":         "SECRET",
		"notes.txt":           "not a secret",
	}
	for p, c := range files {
		full := filepath.Join(home, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(home, ".docker"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("../docker-real.json", filepath.Join(home, ".docker/config.json")); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOME", home)
	// dryexec's own state (e.g. netsim's CA) would default to beneath HOME:
	// keep it elsewhere, so the home holds only what the test put there.
	state := t.TempDir()
	t.Setenv("DRYEXEC_HOME", state)
	t.Setenv("XDG_STATE_HOME", state)
	return home
}

func secrets(d *dryexec.StateDelta) []string {
	var out []string
	for _, v := range d.Violations {
		if v.Kind == "secret" {
			out = append(out, v.Detail)
		}
	}
	return out
}

// TestMaskedSecrets: by default the sandbox sees the caller's credentials
// empty, reading one is recorded, merely looking at one is not, a write to
// one fails, and the host's files are intact.
func TestMaskedSecrets(t *testing.T) {
	requireNS(t)
	home := fakeHome(t)
	before := snapshot(t, home)
	env := map[string]string{"PATH": testPath["PATH"], "HOME": home}
	tests := []struct {
		name     string
		spec     dryexec.TrialSpec
		script   string
		stdout   string
		violated []string // secret violations, "~" for home
	}{
		{"read a key", dryexec.TrialSpec{}, `cat ~/.ssh/id_rsa; echo "rc=$?"`, "rc=0\n", []string{"~/.ssh/id_rsa"}},
		{"list a dir: names, no contents", dryexec.TrialSpec{}, `ls ~/.ssh; cat ~/.ssh/known_hosts ~/.aws/credentials`,
			"id_rsa\nknown_hosts\n", []string{"~/.ssh", "~/.ssh/known_hosts", "~/.aws/credentials"}},
		{"nested dir", dryexec.TrialSpec{}, `cat ~/.kube/cache/x/token; echo .`, ".\n", []string{"~/.kube/cache/x/token"}},
		{"stat is not a read", dryexec.TrialSpec{}, `stat -c %s ~/.netrc ~/.ssh/id_rsa; test -d ~/.aws && echo dir`, "0\n0\ndir\n", nil},
		{"symlinked file masks its target", dryexec.TrialSpec{}, `cat ~/.docker/config.json; echo .`, ".\n", []string{"~/docker-real.json"}},
		{"write refused", dryexec.TrialSpec{}, `echo x > ~/.ssh/id_rsa 2>/dev/null || echo refused; rm -f ~/.netrc 2>/dev/null || echo kept; touch ~/.ssh/new 2>/dev/null || echo nonew`,
			"refused\nkept\nnonew\n", nil},
		{"extra mask", dryexec.TrialSpec{Masks: []string{"~/project.key"}}, `cat ~/project.key ~/notes.txt`, "not a secret", []string{"~/project.key"}},
		{"no default masks", dryexec.TrialSpec{NoDefaultMasks: true}, `cat ~/.ssh/id_rsa`, "-----BEGIN OPENSSH PRIVATE KEY----- SECRET", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := tt.spec
			spec.Action.Env = env
			d := runTrial(t, home, spec, "/bin/sh", "-c", tt.script)
			if d.Process.Stdout != tt.stdout {
				t.Errorf("stdout %q, want %q (stderr %q)", d.Process.Stdout, tt.stdout, d.Process.Stderr)
			}
			var want []string
			for _, w := range tt.violated {
				want = append(want, strings.Replace(w, "~", home, 1))
			}
			if got := secrets(d); fmt.Sprint(got) != fmt.Sprint(want) {
				t.Errorf("secret violations %q, want %q", got, want)
			}
			if len(d.Files) != 0 {
				t.Errorf("files changed: %+v", d.Files)
			}
		})
	}
	sameSnapshot(t, before, snapshot(t, home))
}

// TestCAKeyMaskedOnFirstUse: the first trial of an install, whose netsim CA
// does not exist yet when the trial is asked for, still sees the CA's key
// empty (it is made before the masks are resolved, and masked whatever the
// caller's masks say), and the read is reported.
func TestCAKeyMaskedOnFirstUse(t *testing.T) {
	requireNS(t)
	caDir := filepath.Join(t.TempDir(), "fresh-install", "netsim-ca")
	dir := t.TempDir()
	d := runTrial(t, dir, dryexec.TrialSpec{NetCADir: caDir}, "sh", "-c", "cat "+caDir+"/*; echo end")
	if d.Process.Stdout != "end\n" {
		t.Fatalf("the sandbox read netsim's CA: %q", d.Process.Stdout)
	}
	if b, err := os.ReadFile(filepath.Join(caDir, "netsim-ca.pem")); err != nil || !strings.Contains(string(b), "PRIVATE KEY") {
		t.Fatalf("the CA was not made on the host: %v", err)
	}
	found := false
	for _, v := range d.Violations {
		found = found || (v.Kind == "secret" && strings.HasPrefix(v.Detail, caDir))
	}
	if !found {
		t.Fatalf("the read of the CA was not reported: %+v", d.Violations)
	}
}
