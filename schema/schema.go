// Package schema owns the JSON Schema of the StateDelta contract
// (`dryexec.statedelta/v1`, file statedelta.v1.json, draft 2020-12) and validates
// documents against it.
//
// The schema mirrors the Go types in package dryexec field for field; the tests in
// this package walk those types with reflect and fail if either side gains, loses or
// renames a field, so the two cannot drift apart.
package schema

import (
	"bytes"
	_ "embed"
	"fmt"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// ID is the $id of the v1 schema.
const ID = "https://github.com/dryexec/dryexec/schema/statedelta.v1.json"

//go:embed statedelta.v1.json
var schemaJSON string

// JSON returns the text of the v1 schema. The caller owns the returned slice.
func JSON() []byte { return []byte(schemaJSON) }

// Validator validates documents against the compiled v1 schema. Build one with
// NewValidator and keep it: compiling is the expensive part. A Validator is safe
// for concurrent use.
type Validator struct {
	sch *jsonschema.Schema
}

// NewValidator compiles the embedded v1 schema.
func NewValidator() (*Validator, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(schemaJSON)))
	if err != nil {
		return nil, fmt.Errorf("parsing statedelta schema: %w", err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource(ID, doc); err != nil {
		return nil, fmt.Errorf("loading statedelta schema: %w", err)
	}
	sch, err := c.Compile(ID)
	if err != nil {
		return nil, fmt.Errorf("compiling statedelta schema: %w", err)
	}
	return &Validator{sch: sch}, nil
}

// Validate reports whether doc, a JSON document, is a valid dryexec.statedelta/v1
// StateDelta. A failure of the schema wraps a *jsonschema.ValidationError.
func (v *Validator) Validate(doc []byte) error {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
	if err != nil {
		return fmt.Errorf("validating statedelta: %w", err)
	}
	if err := v.sch.Validate(inst); err != nil {
		return fmt.Errorf("validating statedelta: %w", err)
	}
	return nil
}

// Validate compiles the schema and validates doc once. Callers validating many
// documents should hold a Validator instead.
func Validate(doc []byte) error {
	v, err := NewValidator()
	if err != nil {
		return fmt.Errorf("validating statedelta: %w", err)
	}
	return v.Validate(doc)
}
