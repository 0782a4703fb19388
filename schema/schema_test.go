package schema

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/dryexec/dryexec"
)

const (
	hashA = "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"
	hashB = "486ea46224d1bb4fb680f34f7c9ad96a8f24ec88be73ea8e5a6c65260e9cb8a7"
)

// populated returns a StateDelta with every section filled: every op, every kind,
// a network event, a violation, a decision and a receipt.
func populated() dryexec.StateDelta {
	d := dryexec.StateDelta{
		TrialID: "tr_01",
		Rung:    "ns",
		Action: dryexec.Action{
			Argv:      []string{"sh", "-c", "make build"},
			Cwd:       "/work/proj",
			Env:       map[string]string{"PATH": "/usr/bin:/bin", "HOME": "/root"},
			TimeoutMS: 30000,
		},
		Process: dryexec.Process{
			ExitCode: -1, Signal: "SIGKILL", TimedOut: true,
			Stdout: "out", Stderr: "err", StdoutTruncated: true, StderrTruncated: true,
			DurationNS: 1_500_000_000, CPUUserNS: 900_000, CPUSysNS: 100_000, PeakRSSBytes: 1 << 20,
		},
		Files: []dryexec.FileChange{
			{Path: "/work/proj/new.txt", Op: dryexec.OpCreate, Kind: dryexec.KindFile, Size: 12, Mode: "0644",
				SHA256: hashA, Diff: "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+hello world\n"},
			{Path: "/work/proj/main.go", Op: dryexec.OpModify, Kind: dryexec.KindFile, Size: 40, Mode: "0600",
				SHA256: hashA, BeforeSHA256: hashB, BeforeMode: "0644", Diff: "@@ -1 +1 @@\n-a\n+b\n"},
			{Path: "/work/proj/old.txt", Op: dryexec.OpDelete, Kind: dryexec.KindFile, Mode: "0644",
				BeforeSHA256: hashB, BeforeMode: "0644"},
			{Path: "/work/proj/run.sh", Op: dryexec.OpChmod, Kind: dryexec.KindFile, Size: 7, Mode: "4755",
				SHA256: hashA, BeforeSHA256: hashA, BeforeMode: "0755"},
			{Path: "/work/proj/build", Op: dryexec.OpMkdir, Kind: dryexec.KindDir, Mode: "0755"},
			{Path: "/work/proj/tmp", Op: dryexec.OpRmdir, Kind: dryexec.KindDir, Mode: "0700"},
			{Path: "/work/proj/latest", Op: dryexec.OpSymlink, Kind: dryexec.KindSymlink, Mode: "0777",
				LinkTarget: "build"},
			{Path: "/work/proj/fifo", Op: dryexec.OpCreate, Kind: dryexec.KindOther, Mode: "0644"},
		},
		Touched: []dryexec.FileChange{
			{Path: "/work/proj/util.o", Op: dryexec.OpTouch, Kind: dryexec.KindFile, Size: 12, Mode: "0644",
				SHA256: hashA, MtimeNS: 1_700_000_000_123_456_789, BeforeMtimeNS: 1_600_000_000_000_000_001},
			{Path: "/work/proj/caf\xe9", Op: dryexec.OpTouch, Kind: dryexec.KindDir, Mode: "0755",
				MtimeNS: 1_700_000_000_000_000_000, BeforeMtimeNS: 1_600_000_000_000_000_000},
		},
		Network: []dryexec.NetworkEvent{{
			Proto: "https", Method: "POST", URL: "https://api.example/v1/charges", Host: "api.example",
			Port: 443, Status: 200, Action: "mocked", Reason: "openapi mock", BytesIn: 120, BytesOut: 64,
			SchemaBreach: true,
		}},
		Memory: dryexec.Memory{PeakRSSBytes: 1 << 20, PagesWritten: 3, BytesWritten: 3 * 4096, Method: "soft_dirty"},
		Violations: []dryexec.Violation{{
			Kind: "syscall", Detail: "mount(2) refused", PID: 42, Exe: "/usr/bin/mount",
		}},
		Decision: dryexec.Decision{Choice: "review", RiskScore: 0.4, Reasons: []string{"deletes a file", "network mocked"}},
		Receipt:  dryexec.Receipt{DeltaSHA256: hashB, Signature: "c2lnbmF0dXJl", KeyID: "key-1"},
	}
	d.ComputeTotals()
	d.Normalize()
	return d
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	return b
}

func newValidator(t *testing.T) *Validator {
	t.Helper()
	v, err := NewValidator()
	if err != nil {
		t.Fatalf("NewValidator: %v", err)
	}
	return v
}

func TestValidDocuments(t *testing.T) {
	v := newValidator(t)
	zero := dryexec.StateDelta{}
	zero.Normalize()
	tests := []struct {
		name string
		d    dryexec.StateDelta
	}{
		{"populated", populated()},
		{"zero normalized", zero},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			doc := mustMarshal(t, tt.d)
			if err := v.Validate(doc); err != nil {
				t.Fatalf("Validate: %v\n%s", err, doc)
			}
			if err := Validate(doc); err != nil {
				t.Fatalf("package Validate: %v", err)
			}
		})
	}
}

// TestPopulatedCoversEnums guards the fixture: it must exercise every op and kind.
func TestPopulatedCoversEnums(t *testing.T) {
	ops := map[dryexec.Op]bool{}
	kinds := map[dryexec.Kind]bool{}
	d := populated()
	for _, f := range append(d.Files, d.Touched...) {
		ops[f.Op] = true
		kinds[f.Kind] = true
	}
	for _, op := range []dryexec.Op{dryexec.OpCreate, dryexec.OpModify, dryexec.OpDelete, dryexec.OpChmod,
		dryexec.OpMkdir, dryexec.OpRmdir, dryexec.OpSymlink, dryexec.OpTouch} {
		if !ops[op] {
			t.Errorf("fixture lacks op %q", op)
		}
	}
	for _, k := range []dryexec.Kind{dryexec.KindFile, dryexec.KindDir, dryexec.KindSymlink, dryexec.KindOther} {
		if !kinds[k] {
			t.Errorf("fixture lacks kind %q", k)
		}
	}
}

func TestInvalidDocuments(t *testing.T) {
	v := newValidator(t)
	file0 := func(m map[string]any) map[string]any { return m["files"].([]any)[0].(map[string]any) }
	touched0 := func(m map[string]any) map[string]any { return m["touched"].([]any)[0].(map[string]any) }
	tests := []struct {
		name   string
		mutate func(m map[string]any)
	}{
		{"wrong schema", func(m map[string]any) { m["schema"] = "dryexec.statedelta/v2" }},
		{"unknown top-level field", func(m map[string]any) { m["extra"] = true }},
		{"missing section", func(m map[string]any) { delete(m, "receipt") }},
		{"unknown nested field", func(m map[string]any) { file0(m)["owner"] = "root" }},
		{"relative file path", func(m map[string]any) { file0(m)["path"] = "work/proj/new.txt" }},
		{"bad op", func(m map[string]any) { file0(m)["op"] = "rename" }},
		{"touch among files", func(m map[string]any) { file0(m)["op"] = "touch" }},
		{"create among touched", func(m map[string]any) { touched0(m)["op"] = "create" }},
		{"touched null", func(m map[string]any) { m["touched"] = nil }},
		{"touched path relative", func(m map[string]any) { touched0(m)["path"] = "work/proj/util.o" }},
		{"bad mode", func(m map[string]any) { file0(m)["mode"] = "999" }},
		{"sha256 too short", func(m map[string]any) { file0(m)["sha256"] = "abc123" }},
		{"files null", func(m map[string]any) { m["files"] = nil }},
		{"argv null", func(m map[string]any) { m["action"].(map[string]any)["argv"] = nil }},
		{"negative size", func(m map[string]any) { file0(m)["size"] = -1 }},
		{"risk_score 1.5", func(m map[string]any) { m["decision"].(map[string]any)["risk_score"] = 1.5 }},
		{"bad proto", func(m map[string]any) { m["network"].([]any)[0].(map[string]any)["proto"] = "ftp" }},
		{"env value not string", func(m map[string]any) { m["action"].(map[string]any)["env"].(map[string]any)["N"] = 1 }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m map[string]any
			if err := json.Unmarshal(mustMarshal(t, populated()), &m); err != nil {
				t.Fatal(err)
			}
			tt.mutate(m)
			err := v.Validate(mustMarshal(t, m))
			if err == nil {
				t.Fatal("Validate accepted an invalid document")
			}
			if !strings.HasPrefix(err.Error(), "validating statedelta: ") {
				t.Errorf("error lacks context: %v", err)
			}
			var ve *jsonschema.ValidationError
			if !errors.As(err, &ve) {
				t.Errorf("error does not wrap *jsonschema.ValidationError: %T %v", err, err)
			}
		})
	}
}

func TestMalformedJSON(t *testing.T) {
	v := newValidator(t)
	for _, doc := range []string{"", "{", `{"schema":"dryexec.statedelta/v1"} {}`} {
		if err := v.Validate([]byte(doc)); err == nil {
			t.Errorf("Validate(%q) = nil, want error", doc)
		}
	}
}

func TestSchemaHeader(t *testing.T) {
	var root map[string]any
	if err := json.Unmarshal(JSON(), &root); err != nil {
		t.Fatal(err)
	}
	if root["$id"] != ID {
		t.Errorf("$id = %v, want %v", root["$id"], ID)
	}
	if root["$schema"] != "https://json-schema.org/draft/2020-12/schema" {
		t.Errorf("$schema = %v", root["$schema"])
	}
	if got := root["properties"].(map[string]any)["schema"].(map[string]any)["const"]; got != dryexec.SchemaV1 {
		t.Errorf("schema const = %v, want %v", got, dryexec.SchemaV1)
	}
}

// TestSchemaMatchesGoTypes walks dryexec.StateDelta with reflect and checks, for
// every object, that the Go JSON field names and the schema's properties agree in
// both directions, that required lists exactly the fields Go always emits, that
// objects are closed, and that each property's JSON type matches the Go kind.
func TestSchemaMatchesGoTypes(t *testing.T) {
	var root map[string]any
	if err := json.Unmarshal(JSON(), &root); err != nil {
		t.Fatal(err)
	}
	w := walker{t: t, root: root}
	w.object("$", reflect.TypeFor[dryexec.StateDelta](), root)
}

type walker struct {
	t    *testing.T
	root map[string]any
}

// resolve follows a local "#/$defs/name" $ref.
func (w walker) resolve(where string, node map[string]any) map[string]any {
	ref, ok := node["$ref"].(string)
	if !ok {
		return node
	}
	name, ok := strings.CutPrefix(ref, "#/$defs/")
	if !ok {
		w.t.Fatalf("%s: unsupported $ref %q", where, ref)
	}
	def, ok := w.root["$defs"].(map[string]any)[name].(map[string]any)
	if !ok {
		w.t.Fatalf("%s: $ref %q does not resolve", where, ref)
	}
	return w.resolve(where, def)
}

func (w walker) object(where string, typ reflect.Type, node map[string]any) {
	t := w.t
	node = w.resolve(where, node)
	if node["type"] != "object" {
		t.Errorf("%s: schema type = %v, want object", where, node["type"])
	}
	if node["additionalProperties"] != false {
		t.Errorf("%s: additionalProperties must be false", where)
	}
	props, _ := node["properties"].(map[string]any)
	var required []string
	for _, r := range node["required"].([]any) {
		required = append(required, r.(string))
	}

	goFields := map[string]bool{}
	for f := range typ.Fields() {
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if name == "" {
			name = f.Name
		}
		goFields[name] = true
		omitempty := slices.Contains(strings.Split(opts, ","), "omitempty")
		at := where + "." + name

		prop, ok := props[name].(map[string]any)
		if !ok {
			t.Errorf("%s: Go field %s.%s has no schema property", at, typ.Name(), f.Name)
			continue
		}
		if isReq := slices.Contains(required, name); isReq == omitempty {
			t.Errorf("%s: required=%v but Go omitempty=%v", at, isReq, omitempty)
		}
		w.value(at, f.Type, prop)
	}
	for name := range props {
		if !goFields[name] && !marshalOnly[typ.Name()+"."+name] {
			t.Errorf("%s.%s: schema property has no Go field in %s", where, name, typ.Name())
		}
	}
	for _, name := range required {
		if !goFields[name] {
			t.Errorf("%s: required %q has no Go field in %s", where, name, typ.Name())
		}
	}
}

func (w walker) value(where string, typ reflect.Type, node map[string]any) {
	t := w.t
	node = w.resolve(where, node)
	switch typ.Kind() {
	case reflect.Struct:
		w.object(where, typ, node)
	case reflect.Slice:
		if node["type"] != "array" {
			t.Errorf("%s: schema type = %v, want array", where, node["type"])
			return
		}
		items, ok := node["items"].(map[string]any)
		if !ok {
			t.Errorf("%s: array has no items schema", where)
			return
		}
		w.value(where+"[]", typ.Elem(), items)
	case reflect.Map:
		if node["type"] != "object" {
			t.Errorf("%s: schema type = %v, want object", where, node["type"])
			return
		}
		if node["properties"] != nil {
			t.Errorf("%s: map schema must not list properties", where)
		}
		vals, ok := node["additionalProperties"].(map[string]any)
		if !ok {
			t.Errorf("%s: map schema needs an additionalProperties schema", where)
			return
		}
		w.value(where+"{}", typ.Elem(), vals)
	case reflect.Pointer:
		w.value(where, typ.Elem(), node)
	default:
		w.scalar(where, typ, node)
	}
}

// marshalOnly are schema properties written by a type's MarshalJSON rather
// than by a Go field: the lossless forms of a path that is not UTF-8; and
// the stored trial's state, which `dryexec show --json` adds (store.State).
var marshalOnly = map[string]bool{
	"StateDelta.status":          true,
	"FileChange.path_b64":        true,
	"FileChange.link_target_b64": true,
}

func (w walker) scalar(where string, typ reflect.Type, node map[string]any) {
	var want string
	switch typ.Kind() {
	case reflect.String:
		want = "string"
	case reflect.Bool:
		want = "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		want = "integer"
	case reflect.Float32, reflect.Float64:
		want = "number"
	default:
		w.t.Errorf("%s: unhandled Go kind %s", where, typ.Kind())
		return
	}
	var values []any
	if enum, ok := node["enum"].([]any); ok {
		values = enum
	} else if c, ok := node["const"]; ok {
		values = []any{c}
	}
	if values == nil {
		if node["type"] != want {
			w.t.Errorf("%s: schema type = %v, want %s (Go %s)", where, node["type"], want, typ)
		}
		return
	}
	for _, v := range values {
		if jsonType(v) != want {
			w.t.Errorf("%s: enum/const value %v is %s, want %s (Go %s)", where, v, jsonType(v), want, typ)
		}
	}
}

func jsonType(v any) string {
	switch v := v.(type) {
	case string:
		return "string"
	case bool:
		return "boolean"
	case float64:
		if v == float64(int64(v)) {
			return "integer"
		}
		return "number"
	}
	return "unknown"
}
