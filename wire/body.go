package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// The large-body convention of the session protocol, which both ends use
// for the verbs whose JSON may exceed a header (exec_python's request and
// result, hostcall, emit), and the check of a Value both ends apply.

// inlineBodyMax is the largest JSON body sent in a frame's header; the rest of
// MaxHeader is left for the header's own fields.
const inlineBodyMax = MaxHeader - 64<<10

// EncodeBody prepares v as the body of a frame whose JSON may exceed a header.
// A body that fits goes in the header as usual; a larger one goes as
// attachments whose concatenation is the JSON, with "{}" as the header's body.
// Verbs that use this convention carry no other attachments. The bound is what
// one frame can carry (MaxAttachments × MaxAttachment).
func EncodeBody(v any) (any, [][]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, nil, err
	}
	return EncodeRawBody(b)
}

// EncodeRawBody is EncodeBody of JSON already encoded (the guest shrinks a
// Python result that would not fit before it sends it).
func EncodeRawBody(b []byte) (any, [][]byte, error) {
	if len(b) <= inlineBodyMax {
		return json.RawMessage(b), nil, nil
	}
	if len(b) > MaxAttachments*MaxAttachment {
		return nil, nil, fmt.Errorf("body of %d bytes is more than one frame carries (%d)", len(b), MaxAttachments*MaxAttachment)
	}
	var bin [][]byte
	for len(b) > 0 {
		n := min(len(b), MaxAttachment)
		bin = append(bin, b[:n])
		b = b[n:]
	}
	return json.RawMessage("{}"), bin, nil
}

// DecodeBody is the inverse of EncodeBody: strict decoding (unknown fields and
// trailing data refused) of the header's body, or of the attachments when the
// frame has any. useNumber keeps JSON numbers exact (json.Number).
func DecodeBody(f *Frame, v any, useNumber bool) error {
	if len(f.Bin) == 0 && !useNumber {
		return f.Decode(v)
	}
	data := []byte(f.Body)
	if len(f.Bin) > 0 {
		data = bytes.Join(f.Bin, nil)
	}
	if b := bytes.TrimSpace(data); len(b) == 0 || string(b) == "null" {
		return fmt.Errorf("%w: %s %q has no body", ErrProtocol, f.Kind, f.Verb)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if useNumber {
		dec.UseNumber()
	}
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: decoding %s %q: %v", ErrProtocol, f.Kind, f.Verb, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: decoding %s %q: trailing data after body", ErrProtocol, f.Kind, f.Verb)
	}
	return nil
}

// CheckValue reports whether v is a well-formed Value: a known type with
// only that type's field set. Each end checks what the other sent.
func CheckValue(v *Value) error {
	switch v.Type {
	case "json":
		if v.Bytes != nil || v.Path != "" {
			return fmt.Errorf("a json value with bytes or path set")
		}
	case "bytes":
		if v.JSON != nil || v.Path != "" {
			return fmt.Errorf("a bytes value with json or path set")
		}
	case "file":
		if v.JSON != nil || v.Bytes != nil {
			return fmt.Errorf("a file value with json or bytes set")
		}
		if v.Path == "" || strings.ContainsRune(v.Path, 0) {
			return fmt.Errorf("a file value without a usable path")
		}
	default:
		return fmt.Errorf("unknown value type %q (want json, bytes or file)", v.Type)
	}
	return nil
}
