package cli

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/policy"
)

// everydayCommands are the commands of docs/decision.md's table "Everyday
// commands": what a developer runs all day, each as a real trial under the
// default policy. None may block.
var everydayCommands = []struct {
	tool string
	argv []string
}{
	{"git", []string{"git", "status", "--short"}},
	{"git", []string{"git", "log", "--oneline", "-1"}},
	{"git", []string{"sh", "-c", "git add -A && git commit -qm change"}},
	{"npm", []string{"npm", "--version"}},
	{"node", []string{"node", "-p", "process.version"}},
	{"pip", []string{"pip", "--version"}},
	{"python", []string{"python3", "-c", "print(1)"}},
	{"python", []string{"python3", "-m", "py_compile", "hello.py"}},
	{"go", []string{"go", "version"}},
	{"go", []string{"go", "build", "-o", "hello-go", "./gocmd"}},
	{"make", []string{"make"}},
	{"cc", []string{"cc", "-o", "hello-c", "hello.c"}},
	{"tar", []string{"tar", "czf", "src.tgz", "hello.c", "Makefile"}},
	{"tar", []string{"tar", "xzf", "ball.tgz"}},
}

// TestEverydayCommandsDoNotBlock runs everydayCommands as real trials in a
// small project, with a home whose ~/.npmrc, ~/.netrc and ~/.pypirc are
// masked (npm reads ~/.npmrc on every start, which blocked `npm --version`
// when a masked read counted as any violation), and checks that none is
// decided block and that docs/decision.md's table lists the same commands.
// DRYEXEC_UPDATE_DOCS=1 rewrites that table from this run.
func TestEverydayCommandsDoNotBlock(t *testing.T) {
	requireNS(t)
	proj, home, store := t.TempDir(), t.TempDir(), t.TempDir()
	for name, body := range map[string]string{
		"hello.c":       "#include <stdio.h>\nint main(void) { puts(\"hi\"); return 0; }\n",
		"Makefile":      "hello-make: hello.c\n\tcc -o $@ hello.c\n",
		"hello.py":      "print('hi')\n",
		"gocmd/main.go": "package main\n\nfunc main() { println(\"hi\") }\n",
		"go.mod":        "module example.com/hello\n\ngo 1.21\n",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(proj, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		writeFile(t, proj, name, body)
	}
	for _, f := range []string{".npmrc", ".netrc", ".pypirc"} {
		writeFile(t, home, f, "//registry.example.com/:_authToken=secret\n")
	}
	writeFile(t, home, ".gitconfig", "[user]\n\tname = T\n\temail = t@example.com\n")
	setup := [][]string{{"git", "init", "-q"}, {"git", "add", "-A"}, {"git", "commit", "-qm", "init"}, {"tar", "czf", "ball.tgz", "hello.py"}}
	for _, argv := range setup {
		if _, err := exec.LookPath(argv[0]); err != nil {
			continue
		}
		c := exec.Command(argv[0], argv[1:]...)
		c.Dir, c.Env = proj, append(os.Environ(), "HOME="+home)
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", argv, err, out)
		}
	}
	gocache := filepath.Join(home, ".cache", "go-build")
	if out, err := exec.Command("go", "env", "GOCACHE").Output(); err == nil {
		gocache = strings.TrimSpace(string(out)) // the user's warm cache, as a user's build would
	}
	vars := map[string]string{"HOME": home, "PATH": os.Getenv("PATH"), "GOCACHE": gocache, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"}
	masks := []string{"--mask", home + "/.npmrc", "--mask", home + "/.netrc", "--mask", home + "/.pypirc"}

	var rows []string
	ran := 0
	for _, c := range everydayCommands {
		t.Run(strings.Join(c.argv, " "), func(t *testing.T) {
			if c.tool != "git" && c.tool != "python" {
				testreq.NeedTool(t, c.tool)
			}
			args := append([]string{"run", "--json", "--no-store", "-C", proj, "--env", "GOCACHE", "--env", "GOFLAGS", "--env", "GOTOOLCHAIN"}, masks...)
			code, out, errs := cliWith(t, store, vars, append(append(args, "--"), c.argv...)...)
			if code == ExitInternal || code == ExitUsage {
				t.Fatalf("exit %d: %s", code, errs)
			}
			d := decode(t, out)
			if d.Process.ExitCode != 0 {
				t.Errorf("the command failed (%d):\n%s%s", d.Process.ExitCode, d.Process.Stdout, d.Process.Stderr)
			}
			if d.Decision.Choice == policy.Block {
				t.Errorf("%v is blocked: %q", c.argv, d.Decision.Reasons)
			}
			ran++
			why := "—"
			for _, r := range d.Decision.Reasons {
				if rest, ok := strings.CutPrefix(r, "review: "); ok {
					why = strings.ReplaceAll(rest, home, "~")
					why = strings.ReplaceAll(why, proj, ".")
					if r := []rune(why); len(r) > 100 {
						why = string(r[:100]) + "…"
					}
					break
				}
			}
			rows = append(rows, fmt.Sprintf("| `%s` | %s | %s | %s |", render1(c.argv), d.Decision.Choice,
				strconv.FormatFloat(d.Decision.RiskScore, 'f', 2, 64), why))
		})
	}
	if ran == 0 {
		t.Fatal("no everyday command ran")
	}
	table := "| command | decision | risk | first review reason |\n|---|---|---|---|\n" + strings.Join(rows, "\n") + "\n"
	t.Logf("\n%s", table)

	const docs = "../../docs/decision.md"
	b, err := os.ReadFile(docs)
	if err != nil {
		t.Fatal(err)
	}
	head, rest, ok := strings.Cut(string(b), "<!-- everyday -->\n")
	_, tail, ok2 := strings.Cut(rest, "<!-- /everyday -->")
	if !ok || !ok2 {
		t.Fatal("docs/decision.md lost its everyday-commands markers")
	}
	if os.Getenv("DRYEXEC_UPDATE_DOCS") == "1" && len(rows) == len(everydayCommands) {
		if err := os.WriteFile(docs, []byte(head+"<!-- everyday -->\n"+table+"<!-- /everyday -->"+tail), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	for _, c := range everydayCommands {
		if !strings.Contains(rest, "| `"+render1(c.argv)+"` |") {
			t.Errorf("docs/decision.md's everyday table lacks %v (DRYEXEC_UPDATE_DOCS=1 rewrites it)", c.argv)
		}
	}
	if strings.Contains(strings.SplitN(rest, "<!-- /everyday -->", 2)[0], "| block |") {
		t.Error("docs/decision.md's everyday table shows a block")
	}
}

// render1 is an argv as the table shows it.
func render1(argv []string) string {
	q := make([]string, len(argv))
	for i, a := range argv {
		if strings.ContainsAny(a, " '(){}&|;") {
			a = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
		q[i] = a
	}
	return strings.ReplaceAll(strings.Join(q, " "), "|", `\|`)
}
