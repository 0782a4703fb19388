package render

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// cleanLine escapes one line of text for a terminal, keeping tabs.
func cleanLine(s string) string { return clean(s, false, true) }

// cleanField escapes a value printed inside a line (a path, a URL, a reason):
// newlines and tabs are escaped too, so one value cannot forge another line.
func cleanField(s string) string { return clean(s, false, false) }

// clean returns s with everything a terminal would act on made visible:
//
//   - C0 controls (U+0000–U+001F: ESC, CR, BEL, backspace, …) and DEL as \xNN,
//     except \n and \t when kept; \n, \r and \t as \n, \r, \t when not kept;
//   - C1 controls (U+0080–U+009F, which include the 8-bit CSI and OSC) as \uNNNN;
//   - bytes that are not UTF-8 as \xNN (a terminal in an 8-bit mode would read
//     0x9b as CSI);
//   - Unicode bidirectional overrides and isolates (U+202A–U+202E, U+2066–U+2069)
//     and the LRM/RLM/ALM marks as \uNNNN, so that text cannot display in an order
//     other than the one it has ("Trojan Source").
//
// Backslashes are left alone: the output is for reading, not for parsing back.
func clean(s string, keepNL, keepTab bool) string {
	if !needsCleaning(s, keepNL, keepTab) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\n' && keepNL, r == '\t' && keepTab:
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\r':
			b.WriteString(`\r`)
		case r < 0x20 || r == 0x7f:
			fmt.Fprintf(&b, `\x%02x`, r)
		case isC1(r) || isBidi(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

func needsCleaning(s string, keepNL, keepTab bool) bool {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if (c < 0x20 || c == 0x7f) && !(c == '\n' && keepNL) && !(c == '\t' && keepTab) {
				return true
			}
			i++
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size <= 1 || isC1(r) || isBidi(r) {
			return true
		}
		i += size
	}
	return false
}

func isC1(r rune) bool { return r >= 0x80 && r <= 0x9f }

func isBidi(r rune) bool {
	return r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069 ||
		r == 0x200e || r == 0x200f || r == 0x061c
}

// Sanitize escapes terminal control characters (and newlines and tabs) in s, so
// that text from a sandbox can be printed on one line without steering the
// terminal.
func Sanitize(s string) string { return cleanField(s) }
