package receipt

import (
	"errors"
	"fmt"
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
	c := canon{in: doc, out: make([]byte, 0, len(doc))}
	c.skipSpace()
	if c.pos >= len(c.in) || c.in[c.pos] != '{' {
		return nil, fmt.Errorf("%w: the document is not a JSON object", ErrMalformed)
	}
	if err := c.value(0); err != nil {
		return nil, fmt.Errorf("%w: %v (at byte %d)", ErrMalformed, err, c.pos)
	}
	c.skipSpace()
	if c.pos != len(c.in) {
		return nil, fmt.Errorf("%w: data after the JSON value", ErrMalformed)
	}
	return c.out, nil
}

// ErrMalformed: the document cannot be canonicalised.
var ErrMalformed = errors.New("malformed delta document")

// maxDepth bounds nesting (a delta nests 4 deep); a hostile document must not
// exhaust the stack.
const maxDepth = 64

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

const hexDigits = "0123456789abcdef"

// appendString appends s in canonical form (quoted, RFC 8785 escapes).
func appendString(b []byte, s string) []byte {
	b = append(b, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b = append(b, '\\', c)
		case c == '\b':
			b = append(b, `\b`...)
		case c == '\t':
			b = append(b, `\t`...)
		case c == '\n':
			b = append(b, `\n`...)
		case c == '\f':
			b = append(b, `\f`...)
		case c == '\r':
			b = append(b, `\r`...)
		case c < 0x20:
			b = append(b, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
		default:
			b = append(b, c)
		}
	}
	return append(b, '"')
}

// canon parses JSON from in and appends its canonical form to out in one pass.
// Members are written as parsed and each object's members are then reordered
// in place, so the only copies are one scratch copy per object.
type canon struct {
	in      []byte
	pos     int
	out     []byte
	scratch []byte
}

func (c *canon) skipSpace() {
	for c.pos < len(c.in) {
		switch c.in[c.pos] {
		case ' ', '\t', '\n', '\r':
			c.pos++
		default:
			return
		}
	}
}

func (c *canon) value(depth int) error {
	if depth > maxDepth {
		return fmt.Errorf("nested deeper than %d", maxDepth)
	}
	c.skipSpace()
	if c.pos >= len(c.in) {
		return errors.New("unexpected end of input")
	}
	switch ch := c.in[c.pos]; {
	case ch == '{':
		return c.object(depth)
	case ch == '[':
		return c.array(depth)
	case ch == '"':
		// Fast path: a string without escapes or control characters is
		// already canonical; copy it as is.
		for i := c.pos + 1; i < len(c.in); i++ {
			if b := c.in[i]; b == '"' {
				c.out = append(c.out, c.in[c.pos:i+1]...)
				c.pos = i + 1
				return nil
			} else if b == '\\' || b < 0x20 {
				break
			}
		}
		s, err := c.str()
		if err != nil {
			return err
		}
		c.out = appendString(c.out, s)
		return nil
	case ch == '-' || (ch >= '0' && ch <= '9'):
		return c.number()
	default:
		for _, lit := range []string{"true", "false", "null"} {
			if len(c.in)-c.pos >= len(lit) && string(c.in[c.pos:c.pos+len(lit)]) == lit {
				c.pos += len(lit)
				c.out = append(c.out, lit...)
				return nil
			}
		}
		return fmt.Errorf("unexpected character %q", ch)
	}
}

// span is one member's canonical bytes within out.
type span struct {
	key        string
	start, end int
}

func (c *canon) object(depth int) error {
	c.pos++ // {
	c.out = append(c.out, '{')
	begin := len(c.out)
	var members []span
	for first := true; ; first = false {
		c.skipSpace()
		if c.pos < len(c.in) && c.in[c.pos] == '}' && first {
			c.pos++
			break
		}
		if c.pos >= len(c.in) || c.in[c.pos] != '"' {
			return errors.New("expected a member name")
		}
		key, err := c.str()
		if err != nil {
			return err
		}
		c.skipSpace()
		if c.pos >= len(c.in) || c.in[c.pos] != ':' {
			return errors.New("expected ':'")
		}
		c.pos++
		start := len(c.out)
		c.out = appendString(c.out, key)
		c.out = append(c.out, ':')
		if err := c.value(depth + 1); err != nil {
			return err
		}
		if depth == 0 && key == "receipt" {
			// The receipt carries the hash: it is not part of what is hashed.
			c.out = c.out[:start]
			members = append(members, span{key: key, start: start, end: start})
		} else {
			members = append(members, span{key: key, start: start, end: len(c.out)})
		}
		c.skipSpace()
		if c.pos >= len(c.in) {
			return errors.New("unexpected end of input")
		}
		if c.in[c.pos] == ',' {
			c.pos++
			continue
		}
		if c.in[c.pos] != '}' {
			return errors.New("expected ',' or '}'")
		}
		c.pos++
		break
	}
	sorted := slices.IsSortedFunc(members, func(a, b span) int { return compareUTF16(a.key, b.key) })
	if !sorted {
		slices.SortStableFunc(members, func(a, b span) int { return compareUTF16(a.key, b.key) })
	}
	for i := 1; i < len(members); i++ {
		if members[i].key == members[i-1].key {
			return fmt.Errorf("duplicate member %q", members[i].key)
		}
	}
	// Rewrite the members in order, with commas, from a scratch copy.
	c.scratch = append(c.scratch[:0], c.out[begin:]...)
	c.out = c.out[:begin]
	n := 0
	for _, m := range members {
		if m.end == m.start {
			continue
		}
		if n > 0 {
			c.out = append(c.out, ',')
		}
		c.out = append(c.out, c.scratch[m.start-begin:m.end-begin]...)
		n++
	}
	c.out = append(c.out, '}')
	return nil
}

func (c *canon) array(depth int) error {
	c.pos++ // [
	c.out = append(c.out, '[')
	c.skipSpace()
	if c.pos < len(c.in) && c.in[c.pos] == ']' {
		c.pos++
		c.out = append(c.out, ']')
		return nil
	}
	for {
		if err := c.value(depth + 1); err != nil {
			return err
		}
		c.skipSpace()
		if c.pos >= len(c.in) {
			return errors.New("unexpected end of input")
		}
		switch c.in[c.pos] {
		case ',':
			c.pos++
			c.out = append(c.out, ',')
		case ']':
			c.pos++
			c.out = append(c.out, ']')
			return nil
		default:
			return errors.New("expected ',' or ']'")
		}
	}
}

// str parses a JSON string at pos and returns its value. Without escapes it is
// the raw bytes (UTF-8 validity was checked for the whole document).
func (c *canon) str() (string, error) {
	c.pos++ // "
	start := c.pos
	for c.pos < len(c.in) {
		ch := c.in[c.pos]
		switch {
		case ch == '"':
			s := string(c.in[start:c.pos])
			c.pos++
			return s, nil
		case ch == '\\':
			return c.strSlow(start)
		case ch < 0x20:
			return "", errors.New("control character in a string")
		}
		c.pos++
	}
	return "", errors.New("unterminated string")
}

func (c *canon) strSlow(start int) (string, error) {
	b := append([]byte(nil), c.in[start:c.pos]...)
	for c.pos < len(c.in) {
		ch := c.in[c.pos]
		switch {
		case ch == '"':
			c.pos++
			return string(b), nil
		case ch < 0x20:
			return "", errors.New("control character in a string")
		case ch != '\\':
			b = append(b, ch)
			c.pos++
			continue
		}
		if c.pos+1 >= len(c.in) {
			return "", errors.New("unterminated string")
		}
		esc := c.in[c.pos+1]
		c.pos += 2
		switch esc {
		case '"', '\\', '/':
			b = append(b, esc)
		case 'b':
			b = append(b, '\b')
		case 'f':
			b = append(b, '\f')
		case 'n':
			b = append(b, '\n')
		case 'r':
			b = append(b, '\r')
		case 't':
			b = append(b, '\t')
		case 'u':
			r, err := c.hex4()
			if err != nil {
				return "", err
			}
			if utf16.IsSurrogate(r) {
				// A pair decodes to one code point; a lone surrogate becomes
				// U+FFFD, as encoding/json does.
				r2 := rune(-1)
				if c.pos+1 < len(c.in) && c.in[c.pos] == '\\' && c.in[c.pos+1] == 'u' {
					save := c.pos
					c.pos += 2
					if r2, err = c.hex4(); err != nil {
						return "", err
					}
					if d := utf16.DecodeRune(r, r2); d != utf8.RuneError {
						r = d
					} else {
						c.pos, r = save, utf8.RuneError
					}
				} else {
					r = utf8.RuneError
				}
			}
			b = utf8.AppendRune(b, r)
		default:
			return "", fmt.Errorf("bad escape \\%c", esc)
		}
	}
	return "", errors.New("unterminated string")
}

func (c *canon) hex4() (rune, error) {
	if c.pos+4 > len(c.in) {
		return 0, errors.New("short \\u escape")
	}
	v, err := strconv.ParseUint(string(c.in[c.pos:c.pos+4]), 16, 32)
	if err != nil {
		return 0, errors.New("bad \\u escape")
	}
	c.pos += 4
	return rune(v), nil
}

// number parses a JSON number (checking the grammar) and appends its
// canonical form.
func (c *canon) number() error {
	start := c.pos
	if c.in[c.pos] == '-' {
		c.pos++
	}
	digits := func() int {
		n := 0
		for c.pos < len(c.in) && c.in[c.pos] >= '0' && c.in[c.pos] <= '9' {
			c.pos++
			n++
		}
		return n
	}
	intStart := c.pos
	if n := digits(); n == 0 || (n > 1 && c.in[intStart] == '0') {
		return errors.New("bad number")
	}
	integer := true
	if c.pos < len(c.in) && c.in[c.pos] == '.' {
		c.pos++
		if digits() == 0 {
			return errors.New("bad number")
		}
		integer = false
	}
	if c.pos < len(c.in) && (c.in[c.pos] == 'e' || c.in[c.pos] == 'E') {
		c.pos++
		if c.pos < len(c.in) && (c.in[c.pos] == '+' || c.in[c.pos] == '-') {
			c.pos++
		}
		if digits() == 0 {
			return errors.New("bad number")
		}
		integer = false
	}
	lit := string(c.in[start:c.pos])
	if integer {
		if lit == "-0" {
			lit = "0"
		}
		c.out = append(c.out, lit...)
		return nil
	}
	s, err := canonicalNumber(lit)
	if err != nil {
		return err
	}
	c.out = append(c.out, s...)
	return nil
}
