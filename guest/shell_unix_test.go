//go:build unix

package guest

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/dryexec/dryexec/internal/testreq"
)

// TestParseState: the environment is taken only when its listing is closed
// by the end mark, so a shell that could not start `env -0` (pids limit)
// does not wipe the session's environment; the cwd is taken either way.
func TestParseState(t *testing.T) {
	tests := []struct {
		name        string
		in          string
		cwd         string
		env         []string
		envOK, ok   bool
		wantDropped []string
	}{
		{"complete", "\n/w\n\x00B=2\x00A=1\x00SHLVL=3\x00" + envEnd + "\x00", "/w", []string{"A=1", "B=2"}, true, true, nil},
		{"env -0 refused", "\n/w/sub\n\x00", "/w/sub", nil, false, true, nil},
		{"cut after env", "\n/w\n\x00A=1\x00", "/w", nil, false, true, nil},
		{"value ending in the mark text", "\n/w\n\x00X=" + envEnd + "\x00" + envEnd + "\x00", "/w", []string{"X=" + envEnd}, true, true, nil},
		{"dropped names", "BIG HUGE\n/w\n\x00" + envEnd + "\x00", "/w", nil, true, true, []string{"BIG", "HUGE"}},
		{"no cwd", "\n/w", "", nil, false, false, nil},
		{"empty", "", "", nil, false, false, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dropped, cwd, env, envOK, ok := parseState([]byte(tt.in))
			if ok != tt.ok || envOK != tt.envOK || cwd != tt.cwd || !slices.Equal(env, tt.env) || !slices.Equal(dropped, tt.wantDropped) {
				t.Errorf("parseState(%q) = %q, %q, %q, %v, %v; want %q, %q, %q, %v, %v",
					tt.in, dropped, cwd, env, envOK, ok, tt.wantDropped, tt.cwd, tt.env, tt.envOK, tt.ok)
			}
		})
	}
}

// TestParseExportP: `export -p` as dash prints it is read back exactly, and
// anything a shell could expand or that is not a whole listing fails.
func TestParseExportP(t *testing.T) {
	end := envEnd + "\n"
	tests := []struct {
		name string
		in   string
		env  []string // nil: must fail
	}{
		{"empty", end, []string{}},
		{"plain", "export A='1'\nexport B=''\n" + end, []string{"A=1", "B="}},
		{"no value skipped", "export OLDPWD\nexport A='x'\n" + end, []string{"A=x"}},
		{"newline and fake end mark", "export A='x\n" + envEnd + "\nexport B='\\''y'\n" + end, []string{"A=x\n" + envEnd + "\nexport B='y"}},
		{"dash quote runs", `export A='it'"'"'s'"''"''` + "\n" + end, []string{"A=it's''"}},
		{"'\\'' sequences", `export A='a'\''b'\'''` + "\n" + end, []string{"A=a'b'"}},
		{"double quotes", "export A=\"\\$x \\` \\\" \\\\ \\n\"\n" + end, []string{"A=$x ` \" \\ \\n"}},
		{"equals and binary", "export A='==\x01\xff\xc3\x28\t'\n" + end, []string{"A===\x01\xff\xc3\x28\t"}},
		{"bare", `export A=a\ b` + "\n" + end, []string{"A=a b"}},
		{"no end mark", "export A='1'\n", nil},
		{"after end mark", end + "export A='1'\n", nil},
		{"unterminated quote", "export A='1\n" + end, nil},
		{"ansi-c quoting", "export A=$'\\001'\n" + end, nil},
		{"expansion", "export A=\"$HOME\"\n" + end, nil},
		{"bad name", "export a-b='1'\n" + end, nil},
		{"digit first", "export 1A='1'\n" + end, nil},
		{"declare", "declare -x A=\"1\"\n" + end, nil},
		{"unquoted blank", "export A=a b\n" + end, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env, err := parseExportP([]byte(tt.in))
			if tt.env == nil {
				if err == nil {
					t.Fatalf("parseExportP(%q) = %q, want an error", tt.in, env)
				}
				return
			}
			if err != nil || !slices.Equal(env, tt.env) && len(env)+len(tt.env) > 0 {
				t.Fatalf("parseExportP(%q) = %q, %v; want %q", tt.in, env, err, tt.env)
			}
		})
	}
}

// TestExportPState: the fast wrapper's state keeps what shellWrapper's kept:
// large values are dropped and named, SHLVL and _ are not kept, a cut or
// unreadable listing keeps the previous environment but still moves the cwd.
func TestExportPState(t *testing.T) {
	big := strings.Repeat("x", maxEnvValue+1)
	dropped, cwd, env, envOK, ok := exportPState([]byte("/w\n\x00export BIG='" + big + "'\nexport SHLVL='1'\nexport Z='z'\nexport A='a'\n" + envEnd + "\n"))
	if !ok || !envOK || cwd != "/w" || !slices.Equal(env, []string{"A=a", "Z=z"}) || !slices.Equal(dropped, []string{"BIG"}) {
		t.Errorf("got %q %q %q %v %v", dropped, cwd, env, envOK, ok)
	}
	_, cwd, env, envOK, ok = exportPState([]byte("/w/sub\n\x00export A='a'\n"))
	if !ok || envOK || env != nil || cwd != "/w/sub" {
		t.Errorf("cut listing: got %q %q %v %v", cwd, env, envOK, ok)
	}
	if _, _, _, _, ok = exportPState([]byte("/w")); ok {
		t.Errorf("no cwd: ok")
	}
	// Over what shellWrapper's reader took: the previous environment stands.
	var l strings.Builder
	l.WriteString("/w\n\x00")
	for i := 0; i < 10; i++ {
		fmt.Fprintf(&l, "export V%d='%s'\n", i, strings.Repeat("y", 120000))
	}
	l.WriteString(envEnd + "\n")
	if _, _, env, envOK, ok = exportPState([]byte(l.String())); !ok || envOK || env != nil {
		t.Errorf("oversized: got %d vars, %v %v", len(env), envOK, ok)
	}
}

// TestShellProbe runs the probing wrapper in this host's /bin/sh with a
// hostile environment: the probe's verdict must hold, and when it allows the
// fast wrapper, that wrapper's state must equal the env -0 one exactly.
func TestShellProbe(t *testing.T) {
	env := []string{"PATH=/usr/bin:/bin", "Q=a'b\"c\\d\n" + envEnd + "\nexport X='y'\n'\\''", "BIN=\x01\xff\xc3\x28=", "E="}
	run := func(wrapper, cmd, probe string) []byte {
		return runWrapper(t, "/bin/sh", wrapper, env, cmd, probe)
	}
	cmd := `export N="$(printf 'x\ny')" M=1; unset E; cd /tmp`
	_, cwd, want, envOK, ok, fast, decided := probeState(run(shellWrapper, cmd, envProbe))
	if !ok || !envOK || !decided || cwd == "" {
		t.Fatalf("probe: %q %q %v %v %v", cwd, want, envOK, ok, decided)
	}
	if slices.ContainsFunc(want, func(kv string) bool { return strings.HasPrefix(kv, "__dx_probe=") }) {
		t.Errorf("probe variable kept: %q", want)
	}
	if !fast {
		testreq.Needf(t, testreq.Tool, "/bin/sh export -p", errors.New("not read exactly here; the env -0 path stays"))
	}
	_, cwd2, got, envOK, ok := exportPState(run(shellWrapperFast, cmd, ""))
	if !ok || !envOK || cwd2 != cwd || !slices.Equal(got, want) {
		t.Errorf("fast state = %q %q %v %v; env -0 state %q %q", cwd2, got, envOK, ok, cwd, want)
	}
}

// TestShellWrapperDropsLargeVariables runs the full wrapper in each shell
// here (bash finds the large variables its own way): the variables the
// command exported too large for execve are named and left out, and
// everything else — a value with newlines and an IFS the command set among
// them — is kept exactly; a command that left `set -eu` on, with a variable
// exported without a value, still has its state saved.
func TestShellWrapperDropsLargeVariables(t *testing.T) {
	t.Run("set -eu", func(t *testing.T) {
		for _, sh := range []string{"/bin/sh", "bash", "dash"} {
			path, err := exec.LookPath(sh)
			if err != nil {
				continue
			}
			b := runWrapper(t, path, shellWrapper, []string{"PATH=/usr/bin:/bin", "OTHER=o"}, `set -eu; export NOVALUE KEEP=1; cd /tmp`, "")
			dropped, cwd, env, envOK, ok := parseState(b)
			if !ok || !envOK || cwd != "/tmp" || len(dropped) != 0 || !slices.Contains(env, "KEEP=1") || !slices.Contains(env, "OTHER=o") {
				t.Errorf("%s: state %q %q %q %v %v from %.300q", sh, dropped, cwd, env, envOK, ok, b)
			}
		}
		b := runWrapper(t, "/bin/sh", shellWrapperFast, []string{"PATH=/usr/bin:/bin", "OTHER=o"}, `set -eu; export NOVALUE KEEP=1; cd /tmp; false`, "")
		// The cwd is there whatever /bin/sh is; the environment only where
		// its `export -p` can be read (TestShellProbe).
		if _, cwd, env, envOK, ok := exportPState(b); !ok || cwd != "/tmp" || envOK && !slices.Contains(env, "KEEP=1") {
			t.Errorf("fast wrapper: state %q %q from %.300q", cwd, env, b)
		}
	})
	for _, sh := range []string{"/bin/sh", "bash", "dash"} {
		path, err := exec.LookPath(sh)
		if err != nil {
			continue
		}
		t.Run(sh, func(t *testing.T) {
			cmd := `H=x; while [ ${#H} -lt 140000 ]; do H=$H$H; done; export HUGE=$H HUGE2=$H ML="$(printf 'a\nb')" IFS=,; unset H; export KEEP=1`
			b := runWrapper(t, path, shellWrapper, []string{"PATH=/usr/bin:/bin", "OTHER=o"}, cmd, "")
			dropped, _, env, envOK, ok := parseState(b)
			if !ok || !envOK {
				t.Fatalf("state not read (%v, %v): %.300q", ok, envOK, b)
			}
			slices.Sort(dropped)
			if !slices.Equal(dropped, []string{"HUGE", "HUGE2"}) {
				t.Errorf("dropped %q, want HUGE and HUGE2", dropped)
			}
			for _, kv := range []string{"OTHER=o", "KEEP=1", "ML=a\nb", "IFS=,"} {
				if !slices.Contains(env, kv) {
					t.Errorf("%q not kept: %q", kv, env)
				}
			}
		})
	}
}

// runWrapper runs wrapper in shell as an exec_shell does (cwd and workspace
// "/", the command, the probe value) with env, and returns what it wrote to
// its fd 3.
func runWrapper(t *testing.T, shell, wrapper string, env []string, cmd, probe string) []byte {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	c := exec.Command(shell, "-c", wrapper, "sh", "/", "/", cmd, probe)
	c.Env = env
	c.ExtraFiles = []*os.File{w}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	b, _ := io.ReadAll(r)
	c.Wait()
	return b
}
