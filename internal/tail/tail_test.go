package tail

import (
	"bytes"
	"strings"
	"testing"
)

func TestBuffer(t *testing.T) {
	tests := []struct {
		name      string
		cap       int
		writes    []string
		want      string
		truncated bool
	}{
		{"empty", 4, nil, "", false},
		{"fits", 8, []string{"ab", "cd"}, "abcd", false},
		{"exactly full", 4, []string{"ab", "cd"}, "abcd", false},
		{"one over", 4, []string{"ab", "cde"}, "bcde", true},
		{"wraps many times", 3, []string{"a", "b", "c", "d", "e", "f", "g"}, "efg", true},
		{"single huge write", 4, []string{"0123456789"}, "6789", true},
		{"huge write after some", 4, []string{"xy", "abcd"}, "abcd", true},
		{"large mixed", 5, []string{strings.Repeat("x", 3), "12", "345678"}, "45678", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := New(tt.cap)
			var all bytes.Buffer
			for _, w := range tt.writes {
				b.Write([]byte(w))
				all.WriteString(w)
			}
			got, tr := b.Bytes()
			if string(got) != tt.want || tr != tt.truncated {
				t.Fatalf("got %q truncated=%v, want %q truncated=%v", got, tr, tt.want, tt.truncated)
			}
			if !bytes.HasSuffix(all.Bytes(), got) {
				t.Fatalf("%q is not a tail of %q", got, all.Bytes())
			}
		})
	}
}
