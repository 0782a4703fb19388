package wire

import (
	"encoding/json"
	"strings"
	"testing"
)

func TestBodyRoundTrip(t *testing.T) {
	for _, n := range []int{10, inlineBodyMax + 1, 2 << 20} {
		in := &PythonResult{Transcript: strings.Repeat("t", n), Outputs: map[string]Value{}, OutputsSkipped: map[string]string{}}
		body, bin, err := EncodeBody(in)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := body.(json.RawMessage)
		if (len(bin) > 0) != (n > inlineBodyMax) || len(raw) > inlineBodyMax {
			t.Errorf("%d bytes: %d attachments, header body %d bytes", n, len(bin), len(raw))
		}
		var out PythonResult
		if err := DecodeBody(&Frame{Kind: KindResp, Body: raw, Bin: bin}, &out, false); err != nil {
			t.Fatal(err)
		}
		if out.Transcript != in.Transcript {
			t.Errorf("%d bytes: the transcript changed", n)
		}
	}
	if _, _, err := EncodeRawBody(make([]byte, MaxAttachments*MaxAttachment+1)); err == nil {
		t.Error("a body larger than a frame was accepted")
	}
}

func TestCheckValue(t *testing.T) {
	for _, tc := range []struct {
		v  Value
		ok bool
	}{
		{Value{Type: "json"}, true},
		{Value{Type: "json", JSON: 1}, true},
		{Value{Type: "bytes", Bytes: []byte{1}}, true},
		{Value{Type: "bytes"}, true},
		{Value{Type: "file", Path: "a"}, true},
		{Value{Type: "file"}, false},
		{Value{Type: "file", Path: "a\x00b"}, false},
		{Value{Type: "json", Path: "a"}, false},
		{Value{Type: "bytes", JSON: 1}, false},
		{Value{Type: "pickle"}, false},
		{Value{}, false},
	} {
		if err := CheckValue(&tc.v); (err == nil) != tc.ok {
			t.Errorf("CheckValue(%+v) = %v", tc.v, err)
		}
	}
}

// TestCacheJSON pins the cache bodies' JSON: the guest and the host may be
// different builds (a dryexec-guest beside dryexec), so a renamed field
// would break the cache between them without a version change.
func TestCacheJSON(t *testing.T) {
	for _, tc := range []struct {
		v    any
		want string
	}{
		{&CacheRequest{Key: "k"}, `{"key":"k"}`},
		{&CacheRequest{Key: "k", Offset: 1, Size: 2, Gen: 3, Head: true, Kind: "pickle"}, `{"key":"k","offset":1,"size":2,"gen":3,"head":true,"kind":"pickle"}`},
		{&CacheReply{}, `{"found":false}`},
		{&CacheReply{Found: true, Size: 2, Gen: 3, Kind: "pickle"}, `{"found":true,"size":2,"gen":3,"kind":"pickle"}`},
		{&CacheKeys{}, `{"keys":null}`},
	} {
		b, err := json.Marshal(tc.v)
		if err != nil || string(b) != tc.want {
			t.Errorf("%T: %s, %v; want %s", tc.v, b, err, tc.want)
		}
	}
}
