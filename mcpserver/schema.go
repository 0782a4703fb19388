package mcpserver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// toolSpec is one tool: what tools/list shows and how its arguments are
// checked. enums names the arguments whose values are a closed list (the
// rungs of this build), so that the schema and the check say the same.
type toolSpec struct {
	tool  *mcp.Tool
	enums map[string][]string
}

// addTool registers a tool whose input is In and whose structured output is
// Out. It does not go through mcp.AddTool because that one checks the
// arguments with the SDK's schema validator and unmarshals them with its own
// decoder: an agent then reads `validating "arguments": validating root:
// validating /properties/timeout_ms: type: … has type "string", want
// "integer"`, or a leaked `<invalid reflect.Value>`. Here every mistake is a
// sentence naming the argument, what it must be and what came, and the
// schemas are plain (one type per property: an optional argument is one that
// is not required, never ["null", "array"], which several model providers and
// the MCP Inspector's CLI mishandle).
func addTool[In, Out any](s *mcp.Server, spec toolSpec, h func(context.Context, *mcp.CallToolRequest, In) (string, Out, error)) {
	in := mustSchema[In]()
	for name, vals := range spec.enums {
		p := in.Properties[name]
		for _, v := range vals {
			p.Enum = append(p.Enum, v)
		}
	}
	spec.tool.InputSchema = in
	spec.tool.OutputSchema = mustSchema[Out]()
	s.AddTool(spec.tool, func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		var args In
		if err := decodeArgs(spec.tool.Name, req.Params.Arguments, in, spec.enums, &args); err != nil {
			return errorResult(err), nil
		}
		text, out, err := h(ctx, req, args)
		if err != nil {
			return errorResult(err), nil
		}
		b, err := json.Marshal(out)
		if err != nil {
			return nil, fmt.Errorf("%s: encoding its result: %w", spec.tool.Name, err)
		}
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: text}}, StructuredContent: json.RawMessage(b)}, nil
	})
}

func errorResult(err error) *mcp.CallToolResult {
	r := &mcp.CallToolResult{}
	r.SetError(err)
	return r
}

// mustSchema is the JSON Schema of T with plain types: jsonschema.For gives a
// slice or map field ["null", "array"] (Go's nil), but a client sends a list
// or nothing, never null.
func mustSchema[T any]() *jsonschema.Schema {
	s, err := jsonschema.For[T](nil)
	if err != nil {
		panic(fmt.Sprintf("mcpserver: the schema of %T: %v", *new(T), err)) // a programming error, found by every test
	}
	plain(s)
	return s
}

func plain(s *jsonschema.Schema) {
	if s == nil {
		return
	}
	if len(s.Types) > 0 {
		ts := slices.DeleteFunc(slices.Clone(s.Types), func(t string) bool { return t == "null" })
		if len(ts) == 1 {
			s.Type, s.Types = ts[0], nil
		} else {
			s.Types = ts
		}
	}
	for _, p := range s.Properties {
		plain(p)
	}
	plain(s.Items)
	plain(s.AdditionalProperties)
}

// ArgumentError is a tool's argument that was missing, unknown, of the wrong
// type or not one of its values: the agent's mistake, said as a sentence.
type ArgumentError struct {
	Tool, Arg string
	Msg       string
}

func (e *ArgumentError) Error() string {
	if e.Arg == "" {
		return e.Tool + ": " + e.Msg
	}
	return fmt.Sprintf("%s: argument %q %s", e.Tool, e.Arg, e.Msg)
}

// decodeArgs reads raw, the call's arguments, into v: an object, each
// property known, of the type the schema says, every required one present,
// an enum's value one of its list.
func decodeArgs(tool string, raw json.RawMessage, schema *jsonschema.Schema, enums map[string][]string, v any) error {
	known := slices.Sorted(func(yield func(string) bool) {
		for k := range schema.Properties {
			if !yield(k) {
				return
			}
		}
	})
	var obj map[string]json.RawMessage
	if len(bytes.TrimSpace(raw)) > 0 && string(bytes.TrimSpace(raw)) != "null" {
		if err := json.Unmarshal(raw, &obj); err != nil {
			return &ArgumentError{Tool: tool, Msg: fmt.Sprintf("the arguments must be a JSON object with %s", strings.Join(known, ", "))}
		}
	}
	for k, val := range obj {
		p, ok := schema.Properties[k]
		if !ok {
			return &ArgumentError{Tool: tool, Arg: k, Msg: fmt.Sprintf("is not one of this tool's arguments (%s)", strings.Join(known, ", "))}
		}
		if string(val) == "null" {
			// Not taken as "not given": a client that could not convert
			// what it was told sends null (the MCP Inspector's CLI turns
			// timeout_ms=abc into NaN, which JSON writes as null), and
			// running without the timeout asked for would be wrong.
			if slices.Contains(schema.Required, k) {
				return &ArgumentError{Tool: tool, Arg: k, Msg: "is required and cannot be null: " + want(p)}
			}
			return &ArgumentError{Tool: tool, Arg: k, Msg: "must be " + want(p) + ", not null (leave it out for the default)"}
		}
		if got := jsonKind(val); !typeOK(p, got) {
			return &ArgumentError{Tool: tool, Arg: k, Msg: fmt.Sprintf("must be %s, not %s", want(p), got)}
		}
		if vals, ok := enums[k]; ok {
			var s string
			if json.Unmarshal(val, &s) == nil && !slices.Contains(vals, s) {
				return &ArgumentError{Tool: tool, Arg: k, Msg: fmt.Sprintf("is %q: unknown; choose one of %s", s, strings.Join(vals, ", "))}
			}
		}
	}
	for _, r := range schema.Required {
		if _, ok := obj[r]; !ok {
			return &ArgumentError{Tool: tool, Arg: r, Msg: "is required: " + want(schema.Properties[r])}
		}
	}
	b, _ := json.Marshal(obj)
	if err := json.Unmarshal(b, v); err != nil {
		// What the type checks above let through: a fraction for an
		// integer, a number beyond int64.
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return &ArgumentError{Tool: tool, Arg: te.Field, Msg: fmt.Sprintf("must be %s, not %s", goWant(te.Type), te.Value)}
		}
		return &ArgumentError{Tool: tool, Msg: "the arguments could not be read: " + err.Error()}
	}
	return nil
}

// jsonKind names a JSON value's type as a schema does.
func jsonKind(v json.RawMessage) string {
	v = bytes.TrimSpace(v)
	switch {
	case len(v) == 0:
		return "nothing"
	case v[0] == '"':
		return "a string"
	case v[0] == '[':
		return "a list"
	case v[0] == '{':
		return "an object"
	case v[0] == 't' || v[0] == 'f':
		return "a boolean"
	case v[0] == 'n':
		return "null"
	}
	if bytes.ContainsAny(v, ".eE") {
		return "a fraction"
	}
	return "an integer"
}

func typeOK(p *jsonschema.Schema, got string) bool {
	switch p.Type {
	case "string":
		return got == "a string"
	case "integer":
		return got == "an integer"
	case "number":
		return got == "an integer" || got == "a fraction"
	case "boolean":
		return got == "a boolean"
	case "array":
		return got == "a list"
	case "object":
		return got == "an object"
	}
	return true
}

// want says what a property takes, for an error message.
func want(p *jsonschema.Schema) string {
	switch p.Type {
	case "string":
		if len(p.Enum) > 0 {
			var vs []string
			for _, e := range p.Enum {
				vs = append(vs, fmt.Sprint(e))
			}
			return "one of " + strings.Join(vs, ", ")
		}
		return "a string"
	case "integer":
		return "an integer"
	case "number":
		return "a number"
	case "boolean":
		return "true or false"
	case "array":
		if p.Items != nil && p.Items.Type == "string" {
			return `a list of strings, e.g. ["a", "b"]`
		}
		return "a list"
	case "object":
		return "an object"
	}
	return "a value"
}

func goWant(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return fmt.Sprintf("an integer (at most %d)", int64(1)<<(t.Bits()-1)-1)
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "true or false"
	case reflect.Slice:
		return "a list"
	}
	return "a " + t.Kind().String()
}
