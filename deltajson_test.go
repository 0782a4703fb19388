package dryexec

import (
	"bytes"
	"encoding/json"
	"testing"
)

// TestWriteJSON: the streamed encoding is byte for byte json.MarshalIndent's,
// whatever the files hold (none, a non-UTF-8 path, HTML-escaped characters, a
// member named "files" elsewhere).
func TestWriteJSON(t *testing.T) {
	tests := []struct {
		name string
		d    StateDelta
	}{
		{"no files", StateDelta{}},
		{"files", StateDelta{Files: []FileChange{
			{Path: "/w/a", Op: OpCreate, Kind: KindFile, Size: 3, Diff: "+<&>\n"},
			{Path: "/w/\xff\xfe", Op: OpSymlink, Kind: KindSymlink, LinkTarget: "\x80"},
			{Path: "/w/c", Op: OpDelete, Kind: KindFile},
		}}},
		{"files elsewhere", StateDelta{Action: Action{Env: map[string]string{"files": "[]", "x": "\n  \"files\": []"}},
			Files: []FileChange{{Path: "/w/a"}}, Warnings: []string{"\n  \"files\": []"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.d.Normalize()
			want, err := json.MarshalIndent(&tt.d, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			var got bytes.Buffer
			if err := tt.d.WriteJSON(&got); err != nil {
				t.Fatal(err)
			}
			if got.String() != string(want)+"\n" {
				t.Fatalf("got\n%s\nwant\n%s", got.String(), want)
			}
		})
	}
}
