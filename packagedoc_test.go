package dryexec_test

import (
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryPackageDocumented: every package in the module, test-only ones
// included, has a package doc comment (saying what it owns), in any of its
// files. Generated files and `//go:build ignore` programs do not count as a
// package.
func TestEveryPackageDocumented(t *testing.T) {
	dirs := map[string]bool{} // directory → has a doc comment
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if p != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return err
		}
		for _, cg := range f.Comments {
			if cg.Pos() > f.Package {
				break
			}
			for _, c := range cg.List {
				if c.Text == "//go:build ignore" {
					return nil
				}
			}
		}
		dir := filepath.Dir(p)
		dirs[dir] = dirs[dir] || (f.Doc != nil && strings.TrimSpace(f.Doc.Text()) != "")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(dirs) < 10 {
		t.Fatalf("found only %d packages: not run from the module root?", len(dirs))
	}
	for dir, ok := range dirs {
		if !ok {
			t.Errorf("package %s has no doc comment: say what it owns in one of its files", dir)
		}
	}
}
