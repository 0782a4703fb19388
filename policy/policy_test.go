package policy

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestParseYAMLAndJSONSameShape(t *testing.T) {
	yamlDoc := `
name: build-only
allowed_mutation_targets: ["./build/**"]
denied_mutation_targets: [/etc/**]
limits:
  max_bytes_written: 10MiB
  max_files_deleted: 0
network:
  max_requests: 5
  denied_hosts: ["*.prod.internal"]
  review_egress: false
review_when: {outside_cwd: true, deletes: false, setid: true}
thresholds: {review_above: 0.3, block_above: 0.9}
budgets: {bytes_written: 1048576}
rules:
  - name: net
    expr: size(delta.network) > 0
    result: review
    reason: uses the network
scorer:
  command: [/usr/local/bin/score, --fast]
  timeout_ms: 500
`
	jsonDoc := `{"name":"build-only","allowed_mutation_targets":["./build/**"],"denied_mutation_targets":["/etc/**"],
"limits":{"max_bytes_written":"10MiB","max_files_deleted":0},
"network":{"max_requests":5,"denied_hosts":["*.prod.internal"],"review_egress":false},
"review_when":{"outside_cwd":true,"deletes":false,"setid":true},
"thresholds":{"review_above":0.3,"block_above":0.9},"budgets":{"bytes_written":1048576},
"rules":[{"name":"net","expr":"size(delta.network) > 0","result":"review","reason":"uses the network"}],
"scorer":{"command":["/usr/local/bin/score","--fast"],"timeout_ms":500}}`
	py, err := Parse([]byte(yamlDoc))
	if err != nil {
		t.Fatal(err)
	}
	pj, err := Parse([]byte(jsonDoc))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(py, pj) {
		t.Fatalf("YAML and JSON differ:\n%+v\n%+v", py, pj)
	}
	if *py.Limits.MaxBytesWritten != 10<<20 || *py.Limits.MaxFilesDeleted != 0 || py.Thresholds.ReviewAbove != 0.3 ||
		py.ReviewWhen.Deletes || len(py.Rules) != 1 || py.Scorer.TimeoutMS != 500 {
		t.Fatalf("parsed %+v", py)
	}
	// Absent fields keep the defaults.
	d := Default()
	if *py.Limits.MaxFilesChanged != *d.Limits.MaxFilesChanged || !reflect.DeepEqual(py.SensitivePaths, d.SensitivePaths) ||
		py.Weights != d.Weights || py.Budgets.NetworkRequests != d.Budgets.NetworkRequests {
		t.Fatalf("defaults lost: %+v", py)
	}
	if _, err := Compile(py); err != nil {
		t.Fatal(err)
	}
}

func TestParseEmptyIsDefault(t *testing.T) {
	for _, doc := range []string{"", "# nothing\n", "{}"} {
		p, err := Parse([]byte(doc))
		if err != nil || !reflect.DeepEqual(p, Default()) {
			t.Errorf("%q: %v %+v", doc, err, p)
		}
	}
}

func TestLoadFile(t *testing.T) {
	f := filepath.Join(t.TempDir(), "p.yaml")
	os.WriteFile(f, []byte("allowed_mutation_targets: ['*']\n"), 0o644)
	if _, err := Load(f); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(filepath.Join(t.TempDir(), "missing.yaml")); !errors.Is(err, ErrInvalid) {
		t.Fatalf("missing file: %v", err)
	}
}

// TestBadPolicies: every mistake is an ErrInvalid with a message naming it,
// found when the policy is loaded and compiled, not when a delta is judged.
func TestBadPolicies(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{"unknown field", "alowed_mutation_targets: ['*']", "unknown field"},
		{"unknown nested field", "limits: {max_byte_written: 5}", "unknown field"},
		{"not a mapping", "- a\n- b", "mapping"},
		{"bad yaml", "a: [", "yaml"},
		{"bad size", "limits: {max_bytes_written: lots}", "size"},
		{"negative size", "limits: {max_bytes_written: -1}", "size"},
		{"negative limit", "limits: {max_files_changed: -1}", "negative"},
		{"tilde pattern", "denied_mutation_targets: ['~/.ssh/**']", "~ is not expanded"},
		{"bad glob", "allowed_mutation_targets: ['/a/[']", "bad segment"},
		{"bad host glob", "network: {allowed_hosts: ['[']}", "host pattern"},
		{"threshold out of range", "thresholds: {review_above: 1.5}", "review_above"},
		{"block threshold out of range", "thresholds: {block_above: -0.1}", "block_above"},
		{"negative weight", "weights: {bytes: -1}", "weights.bytes"},
		{"rule without result", "rules: [{name: a, expr: 'true'}]", "result is missing"},
		{"rule with bad result", "rules: [{name: a, expr: 'true', result: maybe}]", "not block, review or allow"},
		{"rule without expr", "rules: [{name: a, result: block}]", "expr is empty"},
		{"rule with a typo", "rules: [{name: a, expr: 'size(delta.netwrk) > 0', result: block}]", "netwrk"},
		{"rule not bool", "rules: [{name: a, expr: 'size(delta.files)', result: block}]", "not bool"},
		{"rule syntax", "rules: [{name: a, expr: 'delta.files.(', result: block}]", "rule \"a\""},
		{"duplicate rule names", "rules: [{name: a, expr: 'true', result: block}, {name: a, expr: 'false', result: block}]", "two rules"},
		{"scorer with both", "scorer: {command: [x], url: 'http://127.0.0.1/'}", "not both"},
		{"scorer with neither", "scorer: {timeout_ms: 5}", "set command or url"},
		{"scorer bad url", "scorer: {url: 'file:///etc/passwd'}", "not an http"},
		{"scorer negative weight", "scorer: {command: [x], external_weight: -1}", "weights"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := Parse([]byte(tt.doc))
			if err == nil {
				_, err = Compile(p)
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want ErrInvalid containing %q", err, tt.want)
			}
		})
	}
}

func TestByteSize(t *testing.T) {
	for in, want := range map[string]ByteSize{"0": 0, "512": 512, "1KiB": 1024, "10MiB": 10 << 20, "1.5GiB": 3 << 29, "5 MB": 5e6, "2kB": 2000, "7B": 7} {
		got, err := ParseByteSize(in)
		if err != nil || got != want {
			t.Errorf("%q = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "x", "-1", "1XB", "NaN", "1e30GiB"} {
		if _, err := ParseByteSize(in); err == nil {
			t.Errorf("%q parsed", in)
		}
	}
}
