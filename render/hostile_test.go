package render

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"testing"
	"unicode/utf8"

	"github.com/dryexec/dryexec"
)

// hostile is what a command can put in any string the delta carries (a
// file name, its output, a symlink target, a URL it asked for): an OSC 52
// clipboard write, a cursor move, an 8-bit CSI, a bidi override, a byte
// that is not UTF-8 and a newline that would forge a line of its own.
const hostile = "\x1b]52;c;cm0gLXJmIH4=\x07\x1b[1A\u009b2J\u202e\xff\r\n  + /etc/ok"

// fillStrings sets every string reachable from v (fields, slice elements,
// map keys and values, through pointers) to hostile, and gives every nil
// slice, map and pointer one element, so no field of the delta is left out
// of the render below, including fields added after this test.
func fillStrings(v reflect.Value, depth int) {
	if depth > 8 {
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString(hostile)
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		fillStrings(v.Elem(), depth+1)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fillStrings(v.Field(i), depth+1)
			}
		}
	case reflect.Slice:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return
		}
		if v.Len() == 0 {
			v.Set(reflect.MakeSlice(v.Type(), 1, 1))
		}
		for i := range v.Len() {
			fillStrings(v.Index(i), depth+1)
		}
	case reflect.Map:
		m := reflect.MakeMap(v.Type())
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fillStrings(k, depth+1)
		fillStrings(e, depth+1)
		m.SetMapIndex(k, e)
		v.Set(m)
	}
}

// TestEveryStringEscaped: whatever string of the delta a command shaped,
// the summary shows it escaped. Every string field is hostile at once,
// then again with each file's op and kind valid (so that every branch of
// the file list runs), on every decision.
func TestEveryStringEscaped(t *testing.T) {
	ops := []struct {
		op   dryexec.Op
		kind dryexec.Kind
	}{
		{hostile, hostile},
		{dryexec.OpCreate, dryexec.KindFile}, {dryexec.OpModify, dryexec.KindFile}, {dryexec.OpDelete, dryexec.KindFile},
		{dryexec.OpChmod, dryexec.KindFile}, {dryexec.OpChmod, dryexec.KindDir}, {dryexec.OpMkdir, dryexec.KindDir},
		{dryexec.OpRmdir, dryexec.KindDir}, {dryexec.OpSymlink, dryexec.KindSymlink}, {dryexec.OpCreate, dryexec.KindOther},
	}
	for _, o := range ops {
		for _, choice := range []string{hostile, "block", "review", "auto_commit"} {
			for _, rung := range []string{hostile, noIsolationRung} {
				for _, col := range []bool{false, true} {
					t.Run(fmt.Sprintf("%s/%s/%s/%s/color=%v", Sanitize(string(o.op)), Sanitize(string(o.kind)), Sanitize(choice), Sanitize(rung), col), func(t *testing.T) {
						d := &dryexec.StateDelta{}
						fillStrings(reflect.ValueOf(d).Elem(), 0)
						for i := range d.Files {
							d.Files[i].Op, d.Files[i].Kind = o.op, o.kind
						}
						d.Decision.Choice, d.Rung = choice, rung
						for _, opt := range []Options{{Color: col}, {Color: col, OutputShown: true, NoCommands: true}} {
							out := summary(t, d, opt)
							assertNoRawControls(t, out, col)
						}
					})
				}
			}
		}
	}
}

// assertNoRawControls fails if out holds a control character, C1, bidi
// override or invalid byte, but \n, \t and (coloured) our own SGR codes.
func assertNoRawControls(t *testing.T, out string, col bool) {
	t.Helper()
	for i, r := range out {
		if r == utf8.RuneError {
			if _, size := utf8.DecodeRuneInString(out[i:]); size == 1 {
				t.Fatalf("invalid byte %#x at %d: %q", out[i], i, out[max(0, i-40):min(len(out), i+40)])
			}
			continue // a real U+FFFD (JSON's stand-in for an invalid byte) steers nothing
		}
		switch {
		case r == '\n' || r == '\t':
		case r == 0x1b:
			if !col || !isOurSGR(out[i:]) {
				t.Fatalf("raw ESC at %d: %q", i, out[max(0, i-40):min(len(out), i+40)])
			}
		case r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f || isBidi(r):
			t.Fatalf("raw control %U at %d: %q", r, i, out[max(0, i-40):min(len(out), i+40)])
		}
	}
}

// TestEveryExchangeStringEscaped: the same for `dryexec show --network`:
// every string of a kept exchange (headers, bodies, URL) is hostile.
func TestEveryExchangeStringEscaped(t *testing.T) {
	var recs []dryexec.Exchange
	fillStrings(reflect.ValueOf(&recs).Elem(), 0)
	recs[0].RequestBody = []byte(hostile[:len(hostile)-len("\xff\r\n  + /etc/ok")] + "\nline 2\x1b[K")
	recs[0].ResponseBody = []byte("ok\u009b1;1H\u202e")
	raw, err := json.Marshal(recs)
	if err != nil {
		t.Fatal(err)
	}
	for _, col := range []bool{false, true} {
		var b bytes.Buffer
		if err := Exchanges(&b, raw, Options{Color: col}); err != nil {
			t.Fatal(err)
		}
		assertNoRawControls(t, b.String(), col)
	}
}
