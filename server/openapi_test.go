package server_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/dryexec/dryexec/schema"
	"github.com/dryexec/dryexec/server"
)

// stateDeltaComponents is what schema/statedelta.v1.json becomes in the
// OpenAPI document: the schema itself as StateDelta and each of its $defs as
// a component of its own (snake_case → CamelCase), so that generated clients
// get named types; $refs follow.
func stateDeltaComponents(t *testing.T) map[string]any {
	t.Helper()
	var sd map[string]any
	if err := json.Unmarshal(schema.JSON(), &sd); err != nil {
		t.Fatal(err)
	}
	camel := func(s string) string {
		var b strings.Builder
		for _, p := range strings.Split(s, "_") {
			b.WriteString(strings.ToUpper(p[:1]) + p[1:])
		}
		return b.String()
	}
	var rewrite func(v any) any
	rewrite = func(v any) any {
		switch v := v.(type) {
		case map[string]any:
			out := map[string]any{}
			for k, x := range v {
				if s, ok := x.(string); ok && k == "$ref" && strings.HasPrefix(s, "#/$defs/") {
					out[k] = "#/components/schemas/" + camel(strings.TrimPrefix(s, "#/$defs/"))
					continue
				}
				out[k] = rewrite(x)
			}
			return out
		case []any:
			out := make([]any, len(v))
			for i, x := range v {
				out[i] = rewrite(x)
			}
			return out
		}
		return v
	}
	defs := sd["$defs"].(map[string]any)
	delete(sd, "$defs")
	delete(sd, "$schema")
	delete(sd, "$id")
	want := map[string]any{"StateDelta": rewrite(sd)}
	for k, v := range defs {
		want[camel(k)] = rewrite(v)
	}
	return want
}

func openapiDoc(t *testing.T) map[string]any {
	t.Helper()
	var doc map[string]any
	if err := json.Unmarshal(server.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

// TestOpenAPIStateDelta: the StateDelta the API documents is the contract's
// schema, component for component, so that a generated client gets typed
// deltas and the two cannot drift apart.
func TestOpenAPIStateDelta(t *testing.T) {
	doc := openapiDoc(t)
	got := doc["components"].(map[string]any)["schemas"].(map[string]any)
	for name, want := range stateDeltaComponents(t) {
		if !reflect.DeepEqual(got[name], want) {
			g, _ := json.MarshalIndent(got[name], "", " ")
			w, _ := json.MarshalIndent(want, "", " ")
			t.Errorf("components/schemas/%s is not schema/statedelta.v1.json's (update server/openapi.json)\nhave:\n%s\nwant:\n%s", name, g, w)
		}
	}
}

// TestOpenAPIStructure checks the rules a client generator and the linters
// rely on: every operation has a unique operationId, a description and
// declared tags; every response set covers 4XX and 5XX; an operation that
// takes a JSON body documents 400 and 415; every $ref resolves.
func TestOpenAPIStructure(t *testing.T) {
	doc := openapiDoc(t)
	if v := doc["openapi"]; v != "3.1.0" {
		t.Errorf("openapi %v: want 3.1.0 (the StateDelta schema is JSON Schema 2020-12)", v)
	}
	tags := map[string]bool{}
	for _, tg := range doc["tags"].([]any) {
		tags[tg.(map[string]any)["name"].(string)] = true
	}
	ids := map[string]bool{}
	for p, ops := range doc["paths"].(map[string]any) {
		for m, o := range ops.(map[string]any) {
			if m == "parameters" {
				continue
			}
			op := o.(map[string]any)
			where := strings.ToUpper(m) + " " + p
			id, _ := op["operationId"].(string)
			if id == "" || ids[id] {
				t.Errorf("%s: operationId %q missing or not unique", where, id)
			}
			ids[id] = true
			if d, _ := op["description"].(string); len(d) < 20 {
				t.Errorf("%s: no description", where)
			}
			ts, _ := op["tags"].([]any)
			if len(ts) == 0 {
				t.Errorf("%s: no tags", where)
			}
			for _, tg := range ts {
				if !tags[tg.(string)] {
					t.Errorf("%s: tag %q is not declared", where, tg)
				}
			}
			rs := op["responses"].(map[string]any)
			var codes []string
			for c := range rs {
				codes = append(codes, c)
			}
			for _, c := range []string{"4XX", "5XX"} {
				if !slices.Contains(codes, c) {
					t.Errorf("%s: responses %v lack %s", where, codes, c)
				}
			}
			if rb, ok := op["requestBody"].(map[string]any); ok {
				if _, json := rb["content"].(map[string]any)["application/json"]; json {
					for _, c := range []string{"400", "415"} {
						if !slices.Contains(codes, c) {
							t.Errorf("%s: takes JSON but responses %v lack %s", where, codes, c)
						}
					}
				}
			}
		}
	}
	// Every $ref is a JSON pointer into this document that resolves.
	var walk func(v any, at string)
	walk = func(v any, at string) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && k == "$ref" {
					if _, err := resolve(doc, s); err != "" {
						t.Errorf("%s: $ref %s: %s", at, s, err)
					}
					continue
				}
				walk(x, at+"/"+k)
			}
		case []any:
			for _, x := range v {
				walk(x, at)
			}
		}
	}
	walk(doc, "#")
}

func resolve(doc map[string]any, ref string) (any, string) {
	p, ok := strings.CutPrefix(ref, "#/")
	if !ok {
		return nil, "not a pointer into this document"
	}
	var cur any = doc
	for _, seg := range strings.Split(p, "/") {
		seg = strings.ReplaceAll(strings.ReplaceAll(seg, "~1", "/"), "~0", "~")
		m, ok := cur.(map[string]any)
		if !ok {
			return nil, "goes through a non-object at " + seg
		}
		if cur, ok = m[seg]; !ok {
			return nil, "no " + seg
		}
	}
	return cur, ""
}
