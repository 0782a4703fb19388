package receipt

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// Canonical returns the canonical form of a StateDelta JSON document: the
// bytes a receipt hashes. The definition (docs/decision.md, "Canonical JSON"):
//
//   - The document is UTF-8 JSON whose top level is an object. Invalid UTF-8,
//     a duplicate member name at any depth, or anything after the value is
//     refused — each could make two readers see two different deltas.
//   - The top-level member "receipt" is left out (it carries the hash); every
//     other member, including "decision", is kept.
//   - Objects: members sorted by name, comparing UTF-16 code units (as RFC 8785);
//     no whitespace anywhere; arrays keep their order.
//   - Strings: `"` and `\` escaped with a backslash; U+0008, U+0009, U+000A,
//     U+000C, U+000D as \b \t \n \f \r; other code points below U+0020 as
//     \u00xx (lower-case hex); everything else as raw UTF-8 (RFC 8785 §3.2.2.2).
//   - Numbers: an integer literal (no fraction, no exponent) is written as its
//     exact decimal ("-0" as "0"); any other number is read as an IEEE-754
//     double and written as ECMAScript's Number.prototype.toString does (RFC 8785
//     §3.2.2.3). This is RFC 8785 (JCS) except that integers beyond 2^53 stay
//     exact instead of being rounded to a double.
//   - true, false, null as themselves.
func Canonical(doc []byte) ([]byte, error) {
	if !utf8.Valid(doc) {
		return nil, fmt.Errorf("%w: the document is not valid UTF-8", ErrMalformed)
	}
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	v, err := readValue(dec, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: data after the JSON value", ErrMalformed)
	}
	obj, ok := v.(object)
	if !ok {
		return nil, fmt.Errorf("%w: the document is not a JSON object", ErrMalformed)
	}
	obj = slices.DeleteFunc(obj, func(m member) bool { return m.name == "receipt" })
	var b bytes.Buffer
	b.Grow(len(doc))
	writeValue(&b, obj)
	return b.Bytes(), nil
}

// ErrMalformed: the document cannot be canonicalised.
var ErrMalformed = errors.New("malformed delta document")

type member struct {
	name string
	val  any
}

type object []member

// maxDepth bounds nesting (a delta nests 4 deep); a hostile document must not
// exhaust the stack.
const maxDepth = 64

func readValue(dec *json.Decoder, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("nested deeper than %d", maxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			var obj object
			seen := map[string]bool{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k := kt.(string)
				if seen[k] {
					return nil, fmt.Errorf("duplicate member %q", k)
				}
				seen[k] = true
				v, err := readValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				obj = append(obj, member{k, v})
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			slices.SortFunc(obj, func(a, b member) int { return compareUTF16(a.name, b.name) })
			return obj, nil
		case '[':
			arr := []any{}
			for dec.More() {
				v, err := readValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			if _, err := dec.Token(); err != nil {
				return nil, err
			}
			return arr, nil
		}
		return nil, fmt.Errorf("unexpected %v", t)
	case json.Number:
		s, err := canonicalNumber(string(t))
		if err != nil {
			return nil, err
		}
		return rawNumber(s), nil
	default: // string, bool, nil
		return t, nil
	}
}

type rawNumber string

func compareUTF16(a, b string) int {
	if isASCII(a) && isASCII(b) {
		return cmpString(a, b)
	}
	ua, ub := utf16.Encode([]rune(a)), utf16.Encode([]rune(b))
	return slices.Compare(ua, ub)
}

func cmpString(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func canonicalNumber(s string) (string, error) {
	integer := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c == '.' || c == 'e' || c == 'E' {
			integer = false
			break
		}
	}
	if integer {
		if s == "-0" {
			return "0", nil
		}
		return s, nil // the decoder checked the JSON grammar: no leading zeros or '+'
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || math.IsInf(f, 0) {
		return "", fmt.Errorf("number %s is not a finite double", s)
	}
	return es6Number(f), nil
}

// es6Number formats f as ECMAScript's Number.prototype.toString (the same
// algorithm encoding/json uses for float64).
func es6Number(f float64) string {
	if f == 0 {
		return "0"
	}
	abs := math.Abs(f)
	format := byte('f')
	if abs < 1e-6 || abs >= 1e21 {
		format = 'e'
	}
	b := strconv.AppendFloat(nil, f, format, -1, 64)
	if format == 'e' {
		// "1e-07" → "1e-7"
		if n := len(b); n >= 4 && b[n-4] == 'e' && b[n-3] == '-' && b[n-2] == '0' {
			b[n-2] = b[n-1]
			b = b[:n-1]
		}
	}
	return string(b)
}

func writeValue(b *bytes.Buffer, v any) {
	switch t := v.(type) {
	case object:
		b.WriteByte('{')
		for i, m := range t {
			if i > 0 {
				b.WriteByte(',')
			}
			writeString(b, m.name)
			b.WriteByte(':')
			writeValue(b, m.val)
		}
		b.WriteByte('}')
	case []any:
		b.WriteByte('[')
		for i, e := range t {
			if i > 0 {
				b.WriteByte(',')
			}
			writeValue(b, e)
		}
		b.WriteByte(']')
	case string:
		writeString(b, t)
	case rawNumber:
		b.WriteString(string(t))
	case bool:
		if t {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case nil:
		b.WriteString("null")
	}
}

const hexDigits = "0123456789abcdef"

func writeString(b *bytes.Buffer, s string) {
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c == '\b':
			b.WriteString(`\b`)
		case c == '\t':
			b.WriteString(`\t`)
		case c == '\n':
			b.WriteString(`\n`)
		case c == '\f':
			b.WriteString(`\f`)
		case c == '\r':
			b.WriteString(`\r`)
		case c < 0x20:
			b.WriteString(`\u00`)
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&0xf])
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
}
