package dryexec

import (
	"encoding/json"
	"testing"
	"unicode/utf8"
)

// TestPathJSONLossless: names that differ only in invalid UTF-8 bytes survive a
// JSON round trip exactly and stay distinct (a lossy path once made commit
// delete a bystander named with U+FFFD).
func TestPathJSONLossless(t *testing.T) {
	for _, tc := range []struct{ path, target string }{
		{"/w/plain.txt", ""},
		{"/w/v\xff", ""},
		{"/w/v\ufffd", ""},
		{"/w/bad\xff\xfe.txt", "to\x80k"},
		{"/w/ok", "\xc3"},
	} {
		in := FileChange{Path: tc.path, LinkTarget: tc.target, Op: OpCreate, Kind: KindFile}
		b, err := json.Marshal(in)
		if err != nil {
			t.Fatal(err)
		}
		if !utf8.Valid(b) {
			t.Fatalf("%q: JSON is not UTF-8: %s", tc.path, b)
		}
		var out FileChange
		if err := json.Unmarshal(b, &out); err != nil {
			t.Fatal(err)
		}
		if out.Path != tc.path || out.LinkTarget != tc.target {
			t.Errorf("round trip of %q/%q gave %q/%q (%s)", tc.path, tc.target, out.Path, out.LinkTarget, b)
		}
	}
	a, _ := json.Marshal(FileChange{Path: "/w/v\xff"})
	b, _ := json.Marshal(FileChange{Path: "/w/v\ufffd"})
	if string(a) == string(b) {
		t.Fatalf("two different names encode alike: %s", a)
	}
}
