package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec/internal/rootless"
	"github.com/dryexec/dryexec/netsim/tun"
	"github.com/dryexec/dryexec/schema"
)

// TestJSONOutputAndStatus: run --json, show --json and the stored
// delta.json write <, > and & as themselves; show --json adds the trial's
// status (and what is left) as the last member, still a valid delta; the
// receipt verifies on the stored delta and on what run and show printed.
func TestJSONOutputAndStatus(t *testing.T) {
	requireNS(t)
	dir, home := t.TempDir(), t.TempDir()
	code, out, errs := cli(t, home, "run", "--json", "-C", dir, "--", "sh", "-c", `echo '<b>&' > 'a<b>&c'; echo x > other`)
	if code == ExitInternal || code == ExitUsage {
		t.Fatalf("run: %d %s", code, errs)
	}
	d := decode(t, out)
	stored, err := os.ReadFile(filepath.Join(home, "trials", d.TrialID, "delta.json"))
	if err != nil {
		t.Fatal(err)
	}
	if code, _, errs := cli(t, home, "commit", d.TrialID, filepath.Join(dir, "other")); code != 0 {
		t.Fatalf("commit other: %d %s", code, errs)
	}
	code, shown, errs := cli(t, home, "show", "--json", d.TrialID)
	if code != 0 {
		t.Fatalf("show --json: %d %s", code, errs)
	}
	for name, doc := range map[string]string{"run --json": out, "delta.json": string(stored), "show --json": shown} {
		if !strings.Contains(doc, `a<b>&c`) || strings.Contains(doc, `\u003c`) || strings.Contains(doc, `\u0026`) {
			t.Errorf("%s escapes <, > or &:\n%s", name, doc)
		}
		if err := schema.Validate([]byte(doc)); err != nil {
			t.Errorf("%s is not a valid delta: %v", name, err)
		}
		f := filepath.Join(t.TempDir(), "d.json")
		os.WriteFile(f, []byte(doc), 0o600)
		if code, vout, verrs := cli(t, home, "verify", f); code != 0 || !strings.Contains(vout, "receipt verifies") {
			t.Errorf("verify of %s: %d %s%s", name, code, vout, verrs)
		}
	}
	var st struct {
		Status struct {
			Status string   `json:"status"`
			Paths  []string `json:"paths"`
			Left   *int     `json:"left"`
		} `json:"status"`
	}
	if err := json.Unmarshal([]byte(shown), &st); err != nil || st.Status.Status != "partial" || st.Status.Left == nil || *st.Status.Left != 1 ||
		len(st.Status.Paths) != 1 {
		t.Errorf("show --json's status: %+v (%v)\n%s", st.Status, err, shown)
	}
	// A status member does not make an edited delta verify.
	tampered := strings.Replace(shown, `"exit_code": 0`, `"exit_code": 1`, 1)
	f := filepath.Join(t.TempDir(), "t.json")
	os.WriteFile(f, []byte(tampered), 0o600)
	if code, _, _ := cli(t, home, "verify", f); code != ExitRefused {
		t.Errorf("verify of an edited show --json: exit %d", code)
	}
}

// TestRunWithoutCommandPrintsUsage: `dryexec run` alone prints how to use
// it, exit 2.
func TestRunWithoutCommandPrintsUsage(t *testing.T) {
	for _, args := range [][]string{{"run"}, {"run", "--"}, {"run", "--json"}} {
		code, out, errs := cli(t, t.TempDir(), args...)
		if code != ExitUsage || !strings.Contains(errs, "Usage:\n  dryexec run [flags] -- CMD [ARG...]") || !strings.Contains(errs, "--quiet") ||
			!strings.Contains(errs, "no command: give it after --") || out != "" {
			t.Errorf("%v: exit %d\nstdout %q\nstderr %s", args, code, out, errs)
		}
	}
}

// TestDoctorNetworkInterception: doctor says whether this user's trials can
// have their network intercepted, as netsim will find it (/dev/net/tun
// opened as this user), and what that means for --net; re-run as nobody,
// for whom a 0600 node is not enough.
func TestDoctorNetworkInterception(t *testing.T) {
	requireNS(t)
	_, out, _ := cli(t, t.TempDir(), "doctor")
	want := "network: interception ok (/dev/net/tun)"
	if err := tun.CheckTUN(); err != nil {
		want = "network: interception unavailable (" + err.Error() + "): --net mock: and allow: are refused"
	}
	if !strings.Contains(out, want) {
		t.Errorf("doctor (uid %d) does not say %q:\n%s", os.Getuid(), want, out)
	}
	if !rootless.Active() {
		if fi, err := os.Stat("/dev/net/tun"); err == nil && fi.Mode().Perm()&0o006 != 0o006 {
			t.Run("rootless", func(t *testing.T) {
				pass, _ := rootless.Rerun(t, "^TestDoctorNetworkInterception$", 2*time.Minute)
				if pass == 0 {
					t.Error("the rootless run passed nothing")
				}
			})
		}
	}
}
