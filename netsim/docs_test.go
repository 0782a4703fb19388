package netsim

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/dryexec/dryexec/netsim/mock"
	"github.com/dryexec/dryexec/netsim/mock/openapi"
)

// TestDocExamples: the mock file examples in docs/network.md load, and
// answer as documented.
func TestDocExamples(t *testing.T) {
	doc, err := os.ReadFile("../docs/network.md")
	if err != nil {
		t.Fatal(err)
	}
	spec, err := os.ReadFile("mock/testdata/petstore.yaml")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```(yaml|json)\n(.*?)```").FindAllSubmatch(doc, -1)
	if len(blocks) != 2 {
		t.Fatalf("%d example blocks in docs/network.md, want a YAML and a JSON one", len(blocks))
	}
	for _, b := range blocks {
		t.Run(string(b[1]), func(t *testing.T) {
			dir := t.TempDir()
			os.MkdirAll(filepath.Join(dir, "fixtures"), 0o755)
			os.WriteFile(filepath.Join(dir, "fixtures", "logo.png"), []byte("\x89PNG\r\n\x1a\n"), 0o644)
			os.WriteFile(filepath.Join(dir, "petstore.yaml"), spec, 0o644)
			os.WriteFile(filepath.Join(dir, "openapi.json"), spec, 0o644)
			file := filepath.Join(dir, "mocks."+string(b[1]))
			os.WriteFile(file, b[2], 0o644)
			s, err := New(context.Background(), Config{CADir: filepath.Join(dir, "ca"), MockFile: file, OpenAPI: openapi.Load,
				LookupEnv: func(k string) (string, bool) { return "tok", k == "GITHUB_TOKEN" }})
			if err != nil {
				t.Fatal(err)
			}
			if string(b[1]) == "yaml" {
				res := s.mocks.Match(context.Background(), &mock.Request{Host: "api.example.com", Method: "GET", Path: "/users/9"})
				if !res.Matched || string(res.Response.Body) != `{"id":1,"name":"Ada"}` {
					t.Errorf("users: %+v", res)
				}
				if got := s.ruleHdrs[&s.rules[0]].Get("Authorization"); got != "token tok" {
					t.Errorf("injected %q", got)
				}
				if blk := s.mocks.Block(); blk == nil || blk.Status != http.StatusForbidden {
					t.Errorf("block %+v", blk)
				}
			}
			res := s.mocks.Match(context.Background(), &mock.Request{Host: "pets.example.com", Method: "GET", Path: "/v1/pets/3"})
			if !res.Matched || res.Response.Status != 200 {
				t.Errorf("openapi: %+v", res)
			}
		})
	}
}
