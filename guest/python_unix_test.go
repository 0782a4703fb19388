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
	if err := wire.DecodeBody(&wire.Frame{Kind: wire.KindResp, Body: body.(json.RawMessage), Bin: bin}, &out, false); err != nil {
		t.Fatal(err)
	}
	if len(out.Outputs) != 0 || !strings.Contains(out.OutputsSkipped["big"], "too large") {
		t.Errorf("outputs %v skipped %v", out.Outputs, out.OutputsSkipped)
	}
	if len(out.Transcript) == 0 || len(out.Transcript) >= 1<<20 || !strings.HasSuffix(res.Transcript, out.Transcript) {
		t.Errorf("transcript of %d bytes", len(out.Transcript))
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
