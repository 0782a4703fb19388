package guest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/dryexec/dryexec/wire"
)

// This file holds what both ends of the session protocol share beyond package
// wire's message types: the large-body convention and the chunked cache bodies.
// They belong in wire; they live here because package session (the host end)
// already imports guest, and wire is owned elsewhere for now.

// inlineBodyMax is the largest JSON body sent in a frame's header; the rest of
// wire.MaxHeader is left for the header's own fields.
const inlineBodyMax = wire.MaxHeader - 64<<10

// EncodeBody prepares v as the body of a frame whose JSON may exceed a header
// (exec_python's request and result, hostcall, emit). A body that fits goes in
// the header as usual; a larger one goes as attachments whose concatenation is
// the JSON, with "{}" as the header's body. Verbs that use this convention carry
// no other attachments. The bound is what one frame can carry (64 × 1 MiB).
func EncodeBody(v any) (any, [][]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, nil, err
	}
	return splitBody(b)
}

// splitBody is EncodeBody of JSON already encoded.
func splitBody(b []byte) (any, [][]byte, error) {
	if len(b) <= inlineBodyMax {
		return json.RawMessage(b), nil, nil
	}
	if len(b) > wire.MaxAttachments*wire.MaxAttachment {
		return nil, nil, fmt.Errorf("body of %d bytes is more than one frame carries (%d)", len(b), wire.MaxAttachments*wire.MaxAttachment)
	}
	var bin [][]byte
	for len(b) > 0 {
		n := min(len(b), wire.MaxAttachment)
		bin = append(bin, b[:n])
		b = b[n:]
	}
	return json.RawMessage("{}"), bin, nil
}

// DecodeBody is the inverse of EncodeBody: strict decoding (unknown fields and
// trailing data refused) of the header's body, or of the attachments when the
// frame has any. useNumber keeps JSON numbers exact (json.Number).
func DecodeBody(f *wire.Frame, v any, useNumber bool) error {
	if len(f.Bin) == 0 && !useNumber {
		return f.Decode(v)
	}
	data := []byte(f.Body)
	if len(f.Bin) > 0 {
		data = bytes.Join(f.Bin, nil)
	}
	if b := bytes.TrimSpace(data); len(b) == 0 || string(b) == "null" {
		return fmt.Errorf("%w: %s %q has no body", wire.ErrProtocol, f.Kind, f.Verb)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if useNumber {
		dec.UseNumber()
	}
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: decoding %s %q: %v", wire.ErrProtocol, f.Kind, f.Verb, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return fmt.Errorf("%w: decoding %s %q: trailing data after body", wire.ErrProtocol, f.Kind, f.Verb)
	}
	return nil
}

// Cache limits, enforced by the host (package session) on what the sandbox
// writes, and by the guest on what it relays.
const (
	// MaxCacheKey bounds a key's length in bytes.
	MaxCacheKey = 4096
	// MaxCacheValue bounds one value: 64 MiB, carried in chunks of
	// wire.MaxAttachment, one per call.
	MaxCacheValue = 64 << 20
)

// CacheRequest is the body of cache.get, cache.set and cache.del: wire.CacheKey
// plus the fields of the chunked transfer. A value larger than
// wire.MaxAttachment moves in several calls, one attachment each:
//
//   - cache.get {key, offset, gen} answers CacheReply{found, size, gen} and
//     attachment 0 = value[offset : offset+MaxAttachment]. The first call has
//     offset 0 and learns gen; later calls send it back, and if the entry
//     changed in between the host refuses with code "changed" and the guest
//     starts again. head asks for found and size only, no attachment.
//   - cache.set {key, offset, size} + attachment 0 = value[offset : …]: chunks
//     in order, starting at 0; the write is recorded (pending until the exec
//     succeeds) when offset+len reaches size. A 0-byte value is one call with
//     an empty attachment.
//   - cache.del {key} answers CacheReply{found}.
type CacheRequest struct {
	Key    string `json:"key"`
	Offset int64  `json:"offset,omitempty"`
	Size   int64  `json:"size,omitempty"`
	Gen    uint64 `json:"gen,omitempty"`
	Head   bool   `json:"head,omitempty"`
	// Kind tags a set's value ("" raw bytes, "pickle"); stored with it.
	Kind string `json:"kind,omitempty"`
}

// CacheReply answers cache.get and cache.del: wire.CacheValue plus the value's
// total size and generation.
type CacheReply struct {
	Found bool   `json:"found"`
	Size  int64  `json:"size,omitempty"`
	Gen   uint64 `json:"gen,omitempty"`
	Kind  string `json:"kind,omitempty"`
}

// CheckValue reports whether v is a well-formed wire.Value: a known type with
// only that type's field set.
func CheckValue(v *wire.Value) error {
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
