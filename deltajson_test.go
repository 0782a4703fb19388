package dryexec

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

// TestWriteJSON: the streamed encoding is byte for byte json.MarshalIndent's
// but for <, > and & written as themselves (UnescapeHTML), whatever the files
// hold (none, a non-UTF-8 path, HTML characters, a member named "files"
// elsewhere), with and without touched entries, which survive a round trip
// exactly (a non-UTF-8 path too).
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
		{"touched", StateDelta{Files: []FileChange{{Path: "/w/a", Op: OpCreate, Kind: KindFile}},
			Touched: []FileChange{
				{Path: "/w/t\xff", Op: OpTouch, Kind: KindFile, Size: 2, MtimeNS: 5, BeforeMtimeNS: 4},
				{Path: "/w", Op: OpTouch, Kind: KindDir, MtimeNS: 7},
			}}},
		{"touched only", StateDelta{Touched: []FileChange{{Path: "/w/t", Op: OpTouch, Kind: KindFile}}}},
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
			written := string(UnescapeHTML(append([]byte(nil), want...))) + "\n"
			if got.String() != written {
				t.Fatalf("got\n%s\nwant\n%s", got.String(), written)
			}
			if strings.Contains(got.String(), `\u003c`) || strings.Contains(got.String(), `\u0026`) {
				t.Fatalf("WriteJSON escapes HTML:\n%s", got.String())
			}
			// The same delta with its changes spilled (SetFileSource):
			// WriteJSON and MarshalJSON read them from the source.
			sp := tt.d
			sp.SetFileSource(sliceSource(tt.d.Files))
			got.Reset()
			if err := sp.WriteJSON(&got); err != nil {
				t.Fatal(err)
			}
			if got.String() != written {
				t.Fatalf("spilled: got\n%s\nwant\n%s", got.String(), written)
			}
			indented, err := json.MarshalIndent(&sp, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			if string(indented) != string(want) {
				t.Fatalf("spilled, json.MarshalIndent: got\n%s\nwant\n%s", indented, want)
			}
			var back StateDelta
			if err := json.Unmarshal(got.Bytes(), &back); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(back.Touched, tt.d.Touched) {
				t.Errorf("touched after a round trip: %+v, want %+v", back.Touched, tt.d.Touched)
			}
		})
	}
}

// sliceSource is a FileSource over a slice, as a spilled delta's would be.
type sliceSource []FileChange

func (s sliceSource) Len() int { return len(s) }
func (s sliceSource) Each(fn func(*FileChange) error) error {
	for i := range s {
		c := s[i] // a copy: fn must not change the source
		if err := fn(&c); err != nil {
			return err
		}
	}
	return nil
}

// TestSpilledDelta: a delta whose changes are in a FileSource counts, totals,
// normalizes and loads them as if they were in Files.
func TestSpilledDelta(t *testing.T) {
	files := []FileChange{
		{Path: "/w/a", Op: OpCreate, Kind: KindFile, Size: 3},
		{Path: "/w/b", Op: OpDelete, Kind: KindFile, Size: 5},
		{Path: "/w/c", Op: OpModify, Kind: KindFile, Size: 7},
	}
	mem := StateDelta{Files: files}
	mem.Normalize()
	mem.ComputeTotals()
	var sp StateDelta
	sp.SetFileSource(sliceSource(files))
	sp.Normalize()
	sp.ComputeTotals()
	if sp.Files != nil || !sp.Spilled() || sp.NumFiles() != 3 {
		t.Fatalf("spilled: Files %v, Spilled %v, NumFiles %d", sp.Files, sp.Spilled(), sp.NumFiles())
	}
	if sp.Totals != mem.Totals {
		t.Fatalf("totals: spilled %+v, in memory %+v", sp.Totals, mem.Totals)
	}
	var paths []string
	if err := sp.EachFile(func(c *FileChange) error { paths = append(paths, c.Path); return nil }); err != nil {
		t.Fatal(err)
	}
	if strings.Join(paths, " ") != "/w/a /w/b /w/c" {
		t.Fatalf("EachFile: %v", paths)
	}
	a, _ := json.Marshal(&mem)
	b, _ := json.Marshal(&sp)
	if string(a) != string(b) {
		t.Fatalf("json.Marshal: spilled\n%s\nin memory\n%s", b, a)
	}
	if err := sp.LoadFiles(); err != nil {
		t.Fatal(err)
	}
	if sp.Spilled() || len(sp.Files) != 3 || sp.Files[2].Path != "/w/c" {
		t.Fatalf("after LoadFiles: spilled %v, files %v", sp.Spilled(), sp.Files)
	}
}

// TestUnescapeHTML: <, > and & come out as themselves, every other escape
// stays (a backslash before "u003c" in the text is not an escape of <), and
// the value is the same.
func TestUnescapeHTML(t *testing.T) {
	for _, s := range []string{"a<b>&c", `\u003c`, `x\`, "\\\\u003c", "é\u2028\x00", `"<"`, ""} {
		b, err := json.Marshal(map[string]string{"k": s})
		if err != nil {
			t.Fatal(err)
		}
		got := UnescapeHTML(append([]byte(nil), b...))
		var back map[string]string
		if err := json.Unmarshal(got, &back); err != nil || back["k"] != s {
			t.Errorf("%q: %s → %s decodes to %q (%v)", s, b, got, back["k"], err)
		}
		if bytes.Contains(got, []byte(`\u003c`)) && !bytes.Contains([]byte(s), []byte(`\u003c`)) || bytes.Contains(got, []byte(`\u0026`)) {
			t.Errorf("%q: %s still escapes HTML", s, got)
		}
	}
}
