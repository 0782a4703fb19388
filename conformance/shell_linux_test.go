package conformance

import (
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec/session"
)

var shellCases = []conformanceCase{
	{"large_result_comes_back", func(t *testing.T, open opener) {
		// A result larger than a frame's attachment (2 × 600 kB) is carried,
		// not a hang or an error.
		s := openDefault(t, open)
		if out := run(t, s, `head -c 600000 /dev/zero | tr '\0' a`); out != strings.Repeat("a", 600000) {
			t.Errorf("stdout of %d bytes", len(out))
		}
	}},
	// ---- persistent state ----
	{"cwd_persists", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		r := sh(t, s, "mkdir -p a/b && cd a/b")
		ws := s.Info().Workspace
		if r.Cwd != ws+"/a/b" {
			t.Errorf("Cwd after cd: %q, want %q", r.Cwd, ws+"/a/b")
		}
		wantOut(t, s, "pwd", ws+"/a/b\n")
		wantOut(t, s, "cd .. && pwd", ws+"/a\n")
		wantOut(t, s, "pwd", ws+"/a\n")
	}},
	{"exported_env_persists", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		run(t, s, "export FOO=bar; export BAZ='two words'")
		wantOut(t, s, `printf '%s|%s\n' "$FOO" "$BAZ"`, "bar|two words\n")
		// Seen by child processes too: it is in the environment.
		wantOut(t, s, `sh -c 'echo $FOO'`, "bar\n")
	}},
	{"unexported_var_does_not_persist", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		run(t, s, "LOCAL=1; f() { :; }")
		// Neither do shell functions: only the cwd and the environment carry over.
		wantOut(t, s, `echo "[${LOCAL-unset}]"; command -v f >/dev/null || echo no-f`, "[unset]\nno-f\n")
	}},
	{"unset_persists", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		run(t, s, "export GONE=1")
		run(t, s, "unset GONE")
		wantOut(t, s, `echo "[${GONE-unset}]"`, "[unset]\n")
	}},
	{"failing_call_keeps_cd_and_export", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		r := sh(t, s, "mkdir sub && cd sub && export AFTER=yes && false")
		if r.ExitCode != 1 {
			t.Fatalf("exit %d, want 1", r.ExitCode)
		}
		wantOut(t, s, `pwd; echo $AFTER`, s.Info().Workspace+"/sub\nyes\n")
	}},
	{"explicit_exit_keeps_cd", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		r := sh(t, s, "mkdir sub; cd sub; export E=1; exit 3")
		if r.ExitCode != 3 {
			t.Fatalf("exit %d, want 3\n%s", r.ExitCode, r.Transcript)
		}
		if r.Cwd != s.Info().Workspace+"/sub" {
			t.Errorf("Cwd %q", r.Cwd)
		}
		wantOut(t, s, `pwd; echo $E`, s.Info().Workspace+"/sub\n1\n")
	}},
	// The cwd is gone (removed, or reset away): the next exec starts at the
	// workspace root.
	{"removed_cwd_falls_back_to_workspace", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		run(t, s, "mkdir gone && cd gone")
		run(t, s, "rmdir ../gone")
		wantOut(t, s, "pwd", s.Info().Workspace+"\n")
	}},
	// With Options.Env the exec sees exactly those variables (and nothing of
	// the host process's environment), plus DRYEXEC_WORKSPACE and, on the ns
	// rung, netsim's trust variables (docs/network.md, "Sessions"), as a
	// trial's command does.
	{"initial_env_exact", func(t *testing.T, open opener) {
		t.Setenv("DRYEXEC_CONFORMANCE_HOST_SECRET", "leak")
		s := open(t, session.Options{Env: map[string]string{"PATH": "/usr/bin:/bin", "ONE": "1", "EMPTY": ""}})
		out := run(t, s, "env | grep -v -e '^PWD=' -e '^OLDPWD=' -e '^SHLVL=' -e '^_=' "+
			"-e '^SSL_CERT_FILE=' -e '^REQUESTS_CA_BUNDLE=' -e '^CURL_CA_BUNDLE=' -e '^NODE_EXTRA_CA_CERTS=' -e '^GIT_SSL_CAINFO=' -e '^PIP_CERT=' | sort")
		if want := "DRYEXEC_WORKSPACE=" + s.Info().Workspace + "\nEMPTY=\nONE=1\nPATH=/usr/bin:/bin\n"; out != want {
			t.Fatalf("env:\n%s", out)
		}
	}},
	{"default_env", func(t *testing.T, open opener) {
		t.Setenv("DRYEXEC_CONFORMANCE_HOST_SECRET", "leak")
		s := openDefault(t, open)
		out := run(t, s, `echo "$HOME|$LANG|${DRYEXEC_CONFORMANCE_HOST_SECRET-unset}"; command -v sh`)
		if want := s.Info().Workspace + "|C.UTF-8|unset\n"; !strings.HasPrefix(out, want) {
			t.Fatalf("got %q, want prefix %q", out, want)
		}
	}},

	// ---- output ----
	{"transcript_merges_streams_in_order", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		r := sh(t, s, "echo out1; sleep 0.1; echo err1 >&2; sleep 0.1; echo out2; sleep 0.1; echo err2 >&2")
		if r.Transcript != "out1\nerr1\nout2\nerr2\n" {
			t.Fatalf("transcript %q", r.Transcript)
		}
	}},
	{"separate_streams", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		r := sh(t, s, "echo out1; echo err1 >&2; echo out2; echo err2 >&2")
		if r.Stdout != "out1\nout2\n" || r.Stderr != "err1\nerr2\n" || r.Truncated {
			t.Fatalf("stdout %q, stderr %q, truncated %v", r.Stdout, r.Stderr, r.Truncated)
		}
	}},
	{"output_over_cap_keeps_tail", func(t *testing.T, open opener) {
		const cap = 4096
		s := open(t, session.Options{OutputCap: cap})
		r := sh(t, s, "i=0; while [ $i -lt 2000 ]; do echo line$i; i=$((i+1)); done; echo END")
		if !r.Truncated {
			t.Error("Truncated not set")
		}
		for name, v := range map[string]string{"stdout": r.Stdout, "transcript": r.Transcript} {
			if len(v) > cap || len(v) < cap/2 {
				t.Errorf("%s is %d bytes, cap %d", name, len(v), cap)
			}
			if !strings.HasSuffix(v, "line1998\nline1999\nEND\n") {
				t.Errorf("%s does not end with the last lines: …%q", name, v[max(0, len(v)-40):])
			}
		}
		if r.ExitCode != 0 {
			t.Errorf("exit %d", r.ExitCode)
		}
	}},
	{"output_at_cap_not_truncated", func(t *testing.T, open opener) {
		s := open(t, session.Options{OutputCap: 4096})
		r := sh(t, s, "head -c 4000 /dev/zero | tr '\\0' x")
		if r.Truncated || len(r.Stdout) != 4000 {
			t.Fatalf("truncated %v, %d bytes", r.Truncated, len(r.Stdout))
		}
	}},
	{"stdin_is_eof", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		r, err := s.Shell(ctx(t), "cat; echo cat=$?; read x; echo read=$?", 20*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if r.TimedOut || r.Stdout != "cat=0\nread=1\n" {
			t.Fatalf("timed out %v, stdout %q", r.TimedOut, r.Stdout)
		}
	}},
	// Output is text: control bytes come through as they are, bytes that are
	// not UTF-8 become U+FFFD (the result is JSON).
	{"control_bytes_kept_invalid_utf8_replaced", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		r := sh(t, s, `printf 'a\001\002\033[0m\tb\377c\342\202\254\n'`)
		if r.Stdout != "a\x01\x02\x1b[0m\tb\ufffdc€\n" || r.Transcript != r.Stdout {
			t.Fatalf("stdout %q, transcript %q", r.Stdout, r.Transcript)
		}
	}},

	// ---- syntax errors ----
	{"syntax_error_session_survives", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		run(t, s, "mkdir d && cd d && export KEEP=1")
		for _, bad := range []string{"if then fi", `echo "unterminated`, "(("} {
			r := sh(t, s, bad)
			if r.ExitCode == 0 || r.Stderr == "" {
				t.Errorf("%q: exit %d, stderr %q; want a failure", bad, r.ExitCode, r.Stderr)
			}
		}
		wantOut(t, s, "pwd; echo $KEEP", s.Info().Workspace+"/d\n1\n")
	}},

	// ---- environment values ----
	{"large_env_value_survives", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		run(t, s, "export BIG=$(head -c 102400 /dev/zero | tr '\\0' a)")
		wantOut(t, s, `printf %s "$BIG" | wc -c; printf %s "$BIG" | tr -d a | wc -c`, "102400\n0\n")
		// Still there an exec later, and in child processes.
		wantOut(t, s, `sh -c 'printf %s "$BIG"' | wc -c`, "102400\n")
	}},
	{"large_initial_env_value_survives", func(t *testing.T, open opener) {
		big := strings.Repeat("b", 100<<10)
		s := open(t, session.Options{Env: map[string]string{"PATH": "/usr/bin:/bin", "BIG": big}})
		wantOut(t, s, `printf %s "$BIG" | wc -c`, "102400\n")
		wantOut(t, s, `printf %s "$BIG" | wc -c`, "102400\n")
	}},
	{"multiline_env_value_survives", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		run(t, s, "export ML='line one\nline=two\n\n  three  \n'")
		r := sh(t, s, `printf '%s' "$ML"`)
		if r.Stdout != "line one\nline=two\n\n  three  \n" {
			t.Fatalf("ML %q", r.Stdout)
		}
		r = sh(t, s, `printf '%s' "$ML"`)
		if r.Stdout != "line one\nline=two\n\n  three  \n" {
			t.Fatalf("ML a second time %q", r.Stdout)
		}
	}},
	// A command that leaves `set -eu` on (and a variable exported without
	// a value, as bash's own OLDPWD is) keeps its cwd and exports, and so
	// does one that fails under set -e after them.
	{"set_eu_keeps_state", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		run(t, s, "mkdir -p d1 d2 && set -eu && export NOVALUE A=1 && cd d1")
		if r := sh(t, s, "set -e; export B=2; cd ../d2; false; echo not reached"); r.ExitCode != 1 || r.Stdout != "" {
			t.Fatalf("exit %d, stdout %q\n%s", r.ExitCode, r.Stdout, r.Transcript)
		}
		if out := run(t, s, `echo "${PWD##*/} $A $B"`); out != "d2 1 2\n" {
			t.Errorf("after set -eu: %q, want \"d2 1 2\"", out)
		}
	}},
	// An exported variable too large for execve is dropped alone, with a
	// warning naming it; the rest of the environment survives.
	{"oversized_exported_env_dropped_alone", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		run(t, s, "export BEFORE=1")
		run(t, s, "export HUGE=$(head -c 140000 /dev/zero | tr '\\0' h); export AFTER=2")
		checkOversized(t, s)
	}},
	{"oversized_initial_env_dropped_alone", func(t *testing.T, open opener) {
		s := open(t, session.Options{Env: map[string]string{"PATH": "/usr/bin:/bin", "BEFORE": "1", "AFTER": "2", "HUGE": strings.Repeat("h", 140000)}})
		checkOversized(t, s)
	}},

	// ---- exit codes ----
	{"exit_codes", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		for _, c := range []struct {
			name, cmd string
			code      int
		}{
			{"zero", "true", 0},
			{"one", "false", 1},
			{"three", "exit 3", 3},
			{"255", "exit 255", 255},
			{"subshell", "(exit 7)", 7},
			{"not_found", "dryexec-no-such-command-xyz", 127},
			{"shell_sigkill", "kill -KILL $$", 128 + 9},
			{"shell_sigterm", "kill -TERM $$", 128 + 15},
			{"child_sigsegv", "sh -c 'kill -SEGV $$'", 128 + 11},
		} {
			t.Run(c.name, func(t *testing.T) {
				r := sh(t, s, c.cmd)
				if r.ExitCode != c.code || r.TimedOut {
					t.Fatalf("%s: exit %d (timed out %v), want %d\n%s", c.cmd, r.ExitCode, r.TimedOut, c.code, r.Transcript)
				}
			})
		}
		// And the session is fine after its shell was killed.
		wantOut(t, s, "echo ok", "ok\n")
	}},

	// ---- timeouts ----
	// The timeout kills the command's whole process group (a background child
	// and a grandchild included) and reports exit 124.
	{"timeout_kills_process_group", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		start := time.Now()
		r, err := s.Shell(ctx(t), `echo before
sleep 300 & echo $! > pids
sh -c 'sleep 300 & echo $! >> pids; exec sleep 301' & echo $! >> pids
while [ "$(wc -l < pids)" -lt 3 ]; do sleep 0.01; done
echo ready
sleep 302`, 1500*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if took := time.Since(start); took > 20*time.Second {
			t.Errorf("the timed-out call took %v", took)
		}
		if r.ExitCode != 124 || !r.TimedOut {
			t.Fatalf("exit %d, timed out %v; want 124, true\n%s", r.ExitCode, r.TimedOut, r.Transcript)
		}
		if !strings.Contains(r.Stdout, "before\n") || !strings.Contains(r.Stdout, "ready\n") {
			t.Errorf("output before the timeout lost: %q", r.Stdout)
		}
		// Every process it started is gone (or a zombie waiting for its reaper).
		out := run(t, s, `n=$(wc -l < pids); echo "n=$n"
for p in $(cat pids); do
  i=0
  while [ -d /proc/$p ] && ! grep -q '^State:[[:space:]]*Z' /proc/$p/status 2>/dev/null; do
    i=$((i+1)); if [ $i -gt 100 ]; then echo "alive $p: $(tr '\0' ' ' < /proc/$p/cmdline)"; break; fi; sleep 0.05
  done
done`)
		if out != "n=3\n" {
			t.Fatalf("after the timeout:\n%s", out)
		}
	}},
	{"session_works_after_timeout", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		run(t, s, "mkdir d && cd d && export KEPT=1")
		r, err := s.Shell(ctx(t), "cd / ; export LOST=1; sleep 300", 500*time.Millisecond)
		if err != nil {
			t.Fatal(err)
		}
		if r.ExitCode != 124 || !r.TimedOut {
			t.Fatalf("exit %d, timed out %v", r.ExitCode, r.TimedOut)
		}
		// A timed-out exec leaves the cwd and environment as they were.
		wantOut(t, s, `pwd; echo "$KEPT|${LOST-unset}"`, s.Info().Workspace+"/d\n1|unset\n")
		if p, err := s.Ping(ctx(t)); err != nil || p.Rung != rungOf(s) {
			t.Fatalf("ping after timeout: %v", err)
		}
	}},
	{"no_timeout_when_fast", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		r, err := s.Shell(ctx(t), "sleep 0.2; echo done", 10*time.Second)
		if err != nil || r.TimedOut || r.ExitCode != 0 || r.Stdout != "done\n" {
			t.Fatalf("%+v, %v", r, err)
		}
		if r.DurationNS < int64(150*time.Millisecond) {
			t.Errorf("duration %v", time.Duration(r.DurationNS))
		}
	}},
	// A background job the command leaves behind does not hold the exec open.
	{"background_job_does_not_block", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		start := time.Now()
		r := sh(t, s, "sleep 30 & echo started")
		if r.ExitCode != 0 || r.Stdout != "started\n" {
			t.Fatalf("%+v", r)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Fatalf("took %v", took)
		}
		wantOut(t, s, "echo next", "next\n")
	}},
}

// checkOversized: the next exec warns that HUGE was dropped, and runs without
// it; BEFORE and AFTER (and PATH) survive; the one after that has nothing left
// to warn about.
func checkOversized(t *testing.T, s *session.Session) {
	t.Helper()
	r := sh(t, s, `echo "${HUGE+set}|$BEFORE|$AFTER"; command -v head >/dev/null && echo path-ok`)
	if r.ExitCode != 0 || r.Stdout != "|1|2\npath-ok\n" {
		t.Fatalf("exit %d, stdout %q\n%s", r.ExitCode, r.Stdout, r.Transcript)
	}
	if !strings.Contains(strings.Join(r.Warnings, "\n"), "HUGE") {
		t.Errorf("no warning naming HUGE: %q", r.Warnings)
	}
	r = sh(t, s, `echo "${HUGE+set}|$BEFORE|$AFTER"`)
	if r.Stdout != "|1|2\n" || len(r.Warnings) != 0 {
		t.Errorf("second exec: stdout %q, warnings %q", r.Stdout, r.Warnings)
	}
}
