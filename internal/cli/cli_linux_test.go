package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/acceptance"
	"github.com/dryexec/dryexec/internal/guestexe"
	"github.com/dryexec/dryexec/internal/runflags"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/netsim/netproc"
	"github.com/dryexec/dryexec/rung/linuxns"
)

func requireNS(t *testing.T) {
	t.Helper()
	testreq.Need(t, testreq.NS, (&linuxns.Rung{}).Available(context.Background()))
}

// cli runs the CLI in-process with a private DRYEXEC_HOME.
func cli(t *testing.T, home string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	env := map[string]string{"DRYEXEC_HOME": home, "PATH": "/usr/local/bin:/usr/bin:/bin", "SECRET_TOKEN": "hunter2", "NO_COLOR": "1"}
	code = Run(context.Background(), args, Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errb,
		Getenv: func(k string) string { return env[k] }})
	return code, out.String(), errb.String()
}

func decode(t *testing.T, s string) *dryexec.StateDelta {
	t.Helper()
	var d dryexec.StateDelta
	if err := json.Unmarshal([]byte(s), &d); err != nil {
		t.Fatalf("not a delta: %v\n%s", err, s)
	}
	return &d
}

func TestRunAcceptanceJSON(t *testing.T) {
	requireNS(t)
	dir, home := t.TempDir(), t.TempDir()
	if err := acceptance.MakeDir(dir); err != nil {
		t.Fatal(err)
	}
	code, out, errs := cli(t, home, "run", "--json", "-C", dir, "--", "sh", "-c", acceptance.Script)
	if code != ExitReview { // it deletes and writes outside its directory
		t.Errorf("exit %d, want %d (review)", code, ExitReview)
	}
	if code == ExitInternal || code == ExitUsage {
		t.Fatalf("exit %d: %s", code, errs)
	}
	d := decode(t, out)
	if err := acceptance.Check(d, dir); err != nil {
		t.Fatal(err)
	}
	if _, ok := d.Action.Env["SECRET_TOKEN"]; ok {
		t.Error("a variable outside the allowlist reached the trial")
	}
}

func TestStoreLifecycle(t *testing.T) {
	requireNS(t)
	dir, home := t.TempDir(), t.TempDir()
	code, out, errs := cli(t, home, "run", "--json", "-C", dir, "--", "sh", "-c", "echo hi > x.txt")
	if code != 0 {
		t.Fatalf("run: %d %s", code, errs)
	}
	d := decode(t, out)
	blob := filepath.Join(home, "trials", d.TrialID, "blobs", d.Files[0].SHA256)
	if b, err := os.ReadFile(blob); err != nil || string(b) != "hi\n" {
		t.Fatalf("blob %s: %q %v", blob, b, err)
	}
	if code, out, _ := cli(t, home, "ls"); code != 0 || !strings.Contains(out, d.TrialID) {
		t.Fatalf("ls: %d %s", code, out)
	}
	code, out, _ = cli(t, home, "show", "--json", d.TrialID)
	if code != 0 || decode(t, out).Files[0].SHA256 != d.Files[0].SHA256 {
		t.Fatalf("show: %d %s", code, out)
	}
	if code, out, _ := cli(t, home, "show", d.TrialID); code != 0 || !strings.Contains(out, "x.txt") {
		t.Fatalf("show (human): %d %s", code, out)
	}
	if code, _, errs := cli(t, home, "discard", d.TrialID); code != 0 {
		t.Fatalf("discard: %d %s", code, errs)
	}
	if _, err := os.Stat(blob); err == nil {
		t.Error("discard kept the trial's contents")
	}
	if code, out, _ := cli(t, home, "show", d.TrialID); code != 0 || !strings.Contains(out, "status: discarded") {
		t.Errorf("show after discard: %d %q", code, out)
	}
	if code, out, _ := cli(t, home, "ls"); code != 0 || !strings.Contains(out, "discarded") {
		t.Errorf("ls after discard: %d %q", code, out)
	}
	for _, tc := range []struct {
		args []string
		err  string
	}{
		{[]string{"discard", d.TrialID}, "was discarded"},
		{[]string{"commit", d.TrialID}, "was discarded"},
		{[]string{"show", "../../etc"}, "trial not found"},
		{[]string{"commit", "tr_aaaaaaaaaaaaaaaaaaaa"}, "trial not found"},
	} {
		code, _, errs := cli(t, home, tc.args...)
		if code != ExitRefused || !strings.Contains(errs, tc.err) {
			t.Errorf("%v: %d %q, want %q", tc.args, code, errs, tc.err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "x.txt")); err == nil {
		t.Error("run changed the host")
	}
}

func TestRunExitCodes(t *testing.T) {
	requireNS(t)
	home := t.TempDir()
	tests := []struct {
		name string
		args []string
		code int
		err  string
	}{
		{"auto_commit", []string{"run", "--no-store", "--", "sh", "-c", "echo x > x"}, 0, ""},
		{"review: outside the working directory", []string{"run", "--no-store", "--", "sh", "-c", "echo x > /tmp/dryexec-review.$$"}, ExitReview, ""},
		{"block: denied target", []string{"run", "--no-store", "--", "sh", "-c", "mkdir -p .ssh; echo k > .ssh/authorized_keys"}, ExitBlock, ""},
		{"block even if the command failed", []string{"run", "--no-store", "--", "sh", "-c", "mkdir -p .ssh; echo k > .ssh/authorized_keys; exit 3"}, ExitBlock, ""},
		{"command's code 3 is not review", []string{"run", "--no-store", "--", "sh", "-c", "exit 3"}, ExitCommandFailed, ""},
		{"command's code 125 is not internal", []string{"run", "--no-store", "--", "sh", "-c", "exit 125"}, ExitCommandFailed, ""},
		{"not found", []string{"run", "--no-store", "--", "no-such-cmd-dryexec"}, ExitCommandFailed, ""},
		{"timeout", []string{"run", "--no-store", "--timeout", "200ms", "--", "sleep", "5"}, ExitCommandFailed, ""},
		{"signal", []string{"run", "--no-store", "--", "sh", "-c", "kill -9 $$"}, ExitCommandFailed, ""},
		{"missing policy file", []string{"run", "--policy", "/no/such/policy.yaml", "--", "true"}, ExitUsage, "no such file"},
		{"unknown rung", []string{"run", "--rung", "nope", "--", "true"}, ExitUsage, "unknown; choose one of"},
		{"unbuilt rung", []string{"run", "--rung", "seatbelt", "--", "true"}, ExitRefused, "unavailable"},
		{"bad cwd", []string{"run", "-C", "/no/such/dir", "--", "true"}, ExitUsage, "not a directory on the host"},
		{"bad env", []string{"run", "--env", "=x", "--", "true"}, ExitUsage, "NAME=VALUE"},
		{"no command", []string{"run"}, ExitUsage, ""},
		{"unknown flag", []string{"run", "--frobnicate", "--", "true"}, ExitUsage, "unknown flag"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, out, errs := cli(t, home, tt.args...)
			if code != tt.code || !strings.Contains(errs, tt.err) {
				t.Fatalf("code %d (want %d), stderr %q (want %q)\n%s", code, tt.code, errs, tt.err, out)
			}
			// A trial that was not stored cannot be committed or
			// discarded: the summary offers neither.
			if slices.Contains(tt.args, "--no-store") && strings.Contains(out, "dryexec commit") {
				t.Fatalf("--no-store summary offers a commit:\n%s", out)
			}
		})
	}
}

func TestDoctor(t *testing.T) {
	requireNS(t)
	code, out, _ := cli(t, t.TempDir(), "doctor", "--json")
	var st []struct {
		Name      string
		Available bool
		Missing   string
	}
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || len(st) != 5 {
		t.Fatalf("doctor: %d %s", code, out)
	}
	// ns is available wherever these tests run (requireNS); others depend
	// on the host (gvisor on runsc) or the build, and say why when not.
	for _, s := range st {
		if (s.Name == "ns" && !s.Available) || (!s.Available && s.Missing == "") {
			t.Errorf("doctor row %+v", s)
		}
	}
}

// TestRootlessSameDelta runs the acceptance scenario as an unprivileged user
// (nobody) with the real binary, and expects the same delta as root gets;
// and with the local engine (cmd/dryexec-local, its guest and netsim's
// role beside it),
// which gives the same delta as the engine.
func TestRootlessSameDelta(t *testing.T) {
	requireNS(t)
	setpriv := testreq.NeedRootless(t)
	base, err := os.MkdirTemp("", "dryexec-rootless-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	os.Chmod(base, 0o755)
	bin := filepath.Join(base, "dryexec")
	goTool := testreq.NeedTool(t, "go")
	build := exec.Command(goTool, "build", "-o", bin, "../../cmd/dryexec")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building dryexec: %v\n%s", err, out)
	}
	localDir := filepath.Join(base, "local")
	for out, args := range map[string][]string{
		runflags.LocalName: {"-tags", "dryexec_nocel", "../../cmd/dryexec-local"},
		guestexe.Name:      {"../../cmd/dryexec-guest"},
		netproc.ExeName:    {"../../cmd/dryexec-netsim"},
	} {
		build := exec.Command(goTool, append([]string{"build", "-o", filepath.Join(localDir, out)}, args...)...)
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		if b, err := build.CombinedOutput(); err != nil {
			t.Fatalf("building %s: %v\n%s", out, err, b)
		}
	}
	work, home := filepath.Join(base, "work"), filepath.Join(base, "home")
	for _, d := range []string{work, home} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := acceptance.MakeDir(work); err != nil {
		t.Fatal(err)
	}
	filepath.Walk(base, func(p string, _ os.FileInfo, _ error) error { return os.Lchown(p, 65534, 65534) })
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
		bin, "run", "--json", "--", "sh", "-c", acceptance.Script)
	cmd.Dir = work
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + home, "DRYEXEC_HOME=" + home + "/state"}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == ExitReview {
		err = nil // the scenario deletes files: review
	}
	if err != nil {
		t.Fatalf("rootless run: %v\n%s", err, stderr.String())
	}
	d := decode(t, string(out))
	if err := acceptance.Check(d, work); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(d.Process.Stdout, "") || d.Process.ExitCode != 0 {
		t.Fatalf("process: %+v", d.Process)
	}
	cmd = exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups",
		filepath.Join(localDir, runflags.LocalName), "run", "--json", "--", "sh", "-c", acceptance.Script)
	cmd.Dir = work
	cmd.Env = []string{"PATH=/usr/bin:/bin", "HOME=" + home, "DRYEXEC_HOME=" + home + "/state", "DRYEXEC_ENGINE=/nonexistent"}
	stderr.Reset()
	cmd.Stderr = &stderr
	lout, err := cmd.Output()
	if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == ExitReview {
		err = nil
	}
	if err != nil {
		t.Fatalf("rootless run of the local engine: %v\n%s", err, stderr.String())
	}
	// Trial ids and the sandbox's pid (the script's $$, in a path) aside.
	pid := regexp.MustCompile(`probe\.[0-9]+`)
	if a, b := pid.ReplaceAllString(deltaShape(t, string(lout)), "probe.PID"), pid.ReplaceAllString(deltaShape(t, string(out)), "probe.PID"); a != b {
		t.Errorf("the local engine's delta differs from the engine's:\nlocal: %s\nengine: %s", lout, out)
	}
	// The command ran as nobody, not as root of some namespace.
	cmd = exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", bin, "run", "--json", "--no-store", "--", "id", "-u")
	cmd.Dir, cmd.Env = work, []string{"PATH=/usr/bin:/bin", "HOME=" + home}
	out, err = cmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	if d := decode(t, string(out)); d.Process.Stdout != "65534\n" {
		t.Fatalf("uid inside: %q", d.Process.Stdout)
	}
}
