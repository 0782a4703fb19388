//go:build unix

package guest

import (
	"bufio"
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/dryexec/dryexec/wire"
)

func TestReadLineBounds(t *testing.T) {
	for _, tc := range []struct {
		name, in string
		max      int
		want     []string
		err      string // of the read after the wanted lines
	}{
		{"lines", "a\nbb\n", 10, []string{"a", "bb"}, "EOF"},
		{"exactly_max", "abcd\n", 4, []string{"abcd"}, "EOF"},
		{"over_max", "abcde\n", 4, nil, "longer than 4"},
		{"over_max_without_newline", strings.Repeat("x", 200<<10), 100 << 10, nil, "longer than"},
		{"cut_short", "ab", 10, nil, "cut short"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := bufio.NewReaderSize(strings.NewReader(tc.in), 16)
			for _, w := range tc.want {
				got, err := readLine(r, tc.max)
				if err != nil || string(got) != w {
					t.Fatalf("readLine = %q, %v; want %q", got, err, w)
				}
			}
			if _, err := readLine(r, tc.max); err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Fatalf("last readLine: %v, want %q", err, tc.err)
			}
		})
	}
}

func TestBodyRoundTrip(t *testing.T) {
	for _, n := range []int{10, inlineBodyMax + 1, 2 << 20} {
		in := &wire.PythonResult{Transcript: strings.Repeat("t", n), Outputs: map[string]wire.Value{}, OutputsSkipped: map[string]string{}}
		body, bin, err := EncodeBody(in)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := body.(json.RawMessage)
		if (len(bin) > 0) != (n > inlineBodyMax) || len(raw) > inlineBodyMax {
			t.Errorf("%d bytes: %d attachments, header body %d bytes", n, len(bin), len(raw))
		}
		var out wire.PythonResult
		if err := DecodeBody(&wire.Frame{Kind: wire.KindResp, Body: raw, Bin: bin}, &out, false); err != nil {
			t.Fatal(err)
		}
		if out.Transcript != in.Transcript {
			t.Errorf("%d bytes: the transcript changed", n)
		}
	}
	if _, _, err := splitBody(make([]byte, wire.MaxAttachments*wire.MaxAttachment+1)); err == nil {
		t.Error("a body larger than a frame was accepted")
	}
}

func TestFitResult(t *testing.T) {
	defer func(m int) { resultMax = m }(resultMax)
	resultMax = 1 << 20
	res := &wire.PythonResult{
		Transcript:     strings.Repeat("\x01", 1<<20), // 6 MiB as JSON
		Prints:         []wire.PrintEntry{{Text: "p"}, {Text: "q"}},
		Outputs:        map[string]wire.Value{"big": {Type: "bytes", Bytes: bytes.Repeat([]byte{1}, 1<<20)}},
		OutputsSkipped: map[string]string{},
	}
	body, bin, err := encodeResult(res)
	if err != nil {
		t.Fatal(err)
	}
	var out wire.PythonResult
	if err := DecodeBody(&wire.Frame{Kind: wire.KindResp, Body: body.(json.RawMessage), Bin: bin}, &out, false); err != nil {
		t.Fatal(err)
	}
	if len(out.Outputs) != 0 || !strings.Contains(out.OutputsSkipped["big"], "too large") {
		t.Errorf("outputs %v skipped %v", out.Outputs, out.OutputsSkipped)
	}
	if len(out.Transcript) == 0 || len(out.Transcript) >= 1<<20 || !strings.HasSuffix(res.Transcript, out.Transcript) {
		t.Errorf("transcript of %d bytes", len(out.Transcript))
	}
}

func TestCheckValue(t *testing.T) {
	for _, tc := range []struct {
		v  wire.Value
		ok bool
	}{
		{wire.Value{Type: "json"}, true},
		{wire.Value{Type: "json", JSON: 1}, true},
		{wire.Value{Type: "bytes", Bytes: []byte{1}}, true},
		{wire.Value{Type: "bytes"}, true},
		{wire.Value{Type: "file", Path: "a"}, true},
		{wire.Value{Type: "file"}, false},
		{wire.Value{Type: "file", Path: "a\x00b"}, false},
		{wire.Value{Type: "json", Path: "a"}, false},
		{wire.Value{Type: "bytes", JSON: 1}, false},
		{wire.Value{Type: "pickle"}, false},
		{wire.Value{}, false},
	} {
		if err := CheckValue(&tc.v); (err == nil) != tc.ok {
			t.Errorf("CheckValue(%+v) = %v", tc.v, err)
		}
	}
}

func TestTailWithin(t *testing.T) {
	for _, s := range []string{"", "plain", "a\x01b\nc\"d\\e<f>g&h\u2028i\xffj\tk", "é€😀", strings.Repeat("\x00é\n", 100)} {
		for n := 0; n <= 6*len(s)+2; n++ {
			tail := tailWithin(s, n)
			if !strings.HasSuffix(s, tail) {
				t.Fatalf("tailWithin(%q, %d) = %q: not a tail", s, n, tail)
			}
			b, _ := json.Marshal(tail)
			if len(b)-2 > n {
				t.Fatalf("tailWithin(%q, %d) = %q encodes to %d bytes", s, n, tail, len(b)-2)
			}
			if n >= 6*len(s) && tail != s {
				t.Fatalf("tailWithin(%q, %d) = %q, want all of it", s, n, tail)
			}
		}
	}
}

func TestStartupNeedsCwd(t *testing.T) {
	for _, tc := range []struct {
		env  []string
		want bool
	}{
		{nil, false},
		{[]string{"PATH=bin:/usr/bin", "HOME=."}, false},
		{[]string{"PYTHONPATH=/a:/b"}, false},
		{[]string{"PYTHONPATH="}, false},
		{[]string{"PYTHONPATH=lib"}, true},
		{[]string{"PYTHONPATH=/a::/b"}, true},
		{[]string{"PYTHONPATH=/a:./b"}, true},
		{[]string{"PYTHONUSERBASE=ub"}, true},
		{[]string{"PYTHONHOME=/usr:usr"}, true},
		{[]string{"PYTHONHASHSEED=0"}, false},
	} {
		if got := startupNeedsCwd(tc.env); got != tc.want {
			t.Errorf("startupNeedsCwd(%q) = %v, want %v", tc.env, got, tc.want)
		}
	}
}
