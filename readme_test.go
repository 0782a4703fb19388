package dryexec_test

import (
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
)

// snippetImports are the packages a README snippet may use without saying
// so; the check imports them all and forgives the ones a snippet leaves
// unused.
var snippetImports = map[string]string{
	"context": "context",
	"time":    "time",
	"dryexec": "github.com/dryexec/dryexec",
	"rung":    "github.com/dryexec/dryexec/rung",
	"session": "github.com/dryexec/dryexec/session",
	"agent":   "github.com/dryexec/dryexec/agent",
	"commit":  "github.com/dryexec/dryexec/commit",
	"store":   "github.com/dryexec/dryexec/store",
	"policy":  "github.com/dryexec/dryexec/policy",
}

// TestREADMEGoSnippetsCompile: every ```go block of the README type-checks
// against the packages as they are, inside a function that has a ctx (the
// snippets are fragments). A renamed function or a changed signature fails
// here rather than in a reader's editor. Unused variables and imports are
// forgiven: a fragment shows a call, not a program.
func TestREADMEGoSnippetsCompile(t *testing.T) {
	b, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(string(b), -1)
	if len(blocks) == 0 {
		t.Fatal("no ```go block in README.md: the check would pass on nothing")
	}
	imp := exportImporter(t)
	for i, blk := range blocks {
		var src strings.Builder
		src.WriteString("package snippet\n\nimport (\n")
		for name, path := range snippetImports {
			src.WriteString("\t" + name + " \"" + path + "\"\n")
		}
		src.WriteString(")\n\nfunc snippet(ctx context.Context) {\n" + blk[1] + "\n}\n")
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, "README.md", src.String(), 0)
		if err != nil {
			t.Errorf("README Go block %d does not parse: %v\n%s", i+1, err, blk[1])
			continue
		}
		var errs []string
		conf := types.Config{Importer: imp, Error: func(err error) {
			msg := err.Error()
			if strings.Contains(msg, "declared and not used") || strings.Contains(msg, "imported and not used") {
				return
			}
			errs = append(errs, msg)
		}}
		conf.Check("snippet", fset, []*ast.File{f}, nil)
		if len(errs) > 0 {
			t.Errorf("README Go block %d does not compile:\n  %s\n%s", i+1, strings.Join(errs, "\n  "), blk[1])
		}
	}
}

// exportImporter imports from the export data `go list -export` builds for
// snippetImports and their dependencies (the gc importer alone looks in
// GOPATH, not in the module).
func exportImporter(t *testing.T) types.Importer {
	t.Helper()
	args := []string{"list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}"}
	for _, path := range snippetImports {
		args = append(args, path)
	}
	out, err := exec.Command("go", args...).Output()
	if err != nil {
		t.Fatalf("go list -export: %v", err)
	}
	exports := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if path, file, ok := strings.Cut(line, "\t"); ok && file != "" {
			exports[path] = file
		}
	}
	return importer.ForCompiler(token.NewFileSet(), "gc", func(path string) (io.ReadCloser, error) {
		file, ok := exports[path]
		if !ok {
			return nil, os.ErrNotExist
		}
		return os.Open(file)
	})
}
