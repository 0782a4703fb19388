package conformance

import (
	"strings"
	"testing"

	"github.com/dryexec/dryexec/session"
)

// environmentCases: what code written for a disposable machine expects of
// the shell and the interpreter it lands in.
var environmentCases = []conformanceCase{
	// The default shell is bash where the sandbox has it: ANSI-C quoting,
	// arrays and [[ ]] work as agents write them.
	{"default_shell_is_bash", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		wantOut(t, s, `printf '%s|' $'a\nb' | od -c | head -1 | tr -s ' '`, "0000000 a \\n b |\n")
		wantOut(t, s, `a=(x y z); [[ ${#a[@]} -eq 3 ]] && echo "${a[1]}"`, "y\n")
		if got := s.Info().Shell; got != "/bin/bash" {
			t.Fatalf("Info().Shell %q, want /bin/bash", got)
		}
	}},
	{"shell_sh_selectable", func(t *testing.T, open opener) {
		s := open(t, session.Options{Shell: "sh"})
		wantOut(t, s, `echo "${BASH_VERSION:-none}"`, "none\n")
		// Still the session's shell: state persists between calls.
		run(t, s, "cd /tmp && export DX_SH=1")
		wantOut(t, s, `echo "$PWD $DX_SH"`, "/tmp 1\n")
	}},
	{"shell_bad_value_refused", func(t *testing.T, open opener) {
		r := rungOf(openDefault(t, open))
		for _, bad := range []string{"zsh-please", "bin/bash", "/nonexistent/shell"} {
			if s, err := session.Open(ctx(t), session.Options{Rung: r, Shell: bad}); err == nil {
				s.Close()
				t.Errorf("Shell %q: the session opened", bad)
			}
		}
	}},
	// DRYEXEC_WORKSPACE names the workspace in shell and Python execs alike,
	// whatever the cwd.
	{"workspace_env", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		ws := s.Info().Workspace
		wantOut(t, s, `cd / && echo "$DRYEXEC_WORKSPACE"`, ws+"\n")
		r := pyOK(t, s, "import os\nprint(os.environ['DRYEXEC_WORKSPACE'])", nil)
		if got := strings.TrimSpace(r.Transcript); got != ws {
			t.Fatalf("python sees DRYEXEC_WORKSPACE %q, want %q", got, ws)
		}
	}},
	// A module at the workspace's root still imports after the code cds
	// elsewhere (python -c alone would look in the new cwd).
	{"python_imports_from_workspace_root", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		run(t, s, "printf 'VALUE = 42\\n' > wsmod.py && mkdir -p sub")
		r := pyOK(t, s, "import os\nos.chdir('sub')\nimport wsmod\nprint(wsmod.VALUE)", nil)
		if got := strings.TrimSpace(r.Transcript); got != "42" {
			t.Fatalf("import after chdir printed %q, want 42", got)
		}
		// The shell's cwd stays a sub dir for the next exec: still importable.
		run(t, s, "cd sub")
		r = pyOK(t, s, "import wsmod\nprint(wsmod.VALUE + 1)", nil)
		if got := strings.TrimSpace(r.Transcript); got != "43" {
			t.Fatalf("import from a sub dir cwd printed %q, want 43", got)
		}
	}},
}
