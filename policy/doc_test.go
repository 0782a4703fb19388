package policy

import (
	"os"
	"reflect"
	"strings"
	"testing"
)

// TestDocumentedDefaultPolicy keeps docs/decision.md's default policy true.
func TestDocumentedDefaultPolicy(t *testing.T) {
	b, err := os.ReadFile("../docs/decision.md")
	if err != nil {
		t.Fatal("the docs are part of the repository:", err)
	}
	_, rest, ok := strings.Cut(string(b), "<!-- default-policy -->")
	block, _, ok2 := strings.Cut(rest, "<!-- /default-policy -->")
	if !ok || !ok2 {
		t.Fatal("docs/decision.md lost its default-policy markers")
	}
	block = strings.TrimSpace(block)
	block = strings.TrimPrefix(block, "```yaml")
	block = strings.TrimSuffix(block, "```")
	// Parse starts from Default; start from nothing to see only the document.
	p, err := parseOnto(Policy{}, []byte(block))
	if err != nil {
		t.Fatal(err)
	}
	if d := Default(); !reflect.DeepEqual(p, d) {
		t.Fatalf("the documented default differs from Default():\ndoc  %+v\ncode %+v", p, d)
	}
}

// TestDocumentedExamplePolicy: the example in docs/decision.md loads and
// compiles.
func TestDocumentedExamplePolicy(t *testing.T) {
	b, err := os.ReadFile("../docs/decision.md")
	if err != nil {
		t.Fatal("the docs are part of the repository:", err)
	}
	_, rest, ok := strings.Cut(string(b), "```yaml\nname: build-only\n")
	block, _, ok2 := strings.Cut(rest, "```")
	if !ok || !ok2 {
		t.Fatal("docs/decision.md lost its example policy")
	}
	p, err := Parse([]byte("name: build-only\n" + block))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Compile(p); err != nil {
		t.Fatal(err)
	}
	if len(p.Rules) != 3 || p.Scorer == nil || p.Violations.ReviewKinds[0] != "syscall" {
		t.Fatalf("example parsed as %+v", p)
	}
}
