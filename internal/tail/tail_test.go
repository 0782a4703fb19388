package tail

import (
	"bytes"
	"errors"
	"io"
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

type failWriter struct{ n int }

func (f *failWriter) Write(p []byte) (int, error) { f.n += len(p); return 0, errFail }

var errFail = errors.New("reader went away")

// TestTee: the live writer sees every byte, and its failure does not cut
// what the buffer keeps.
func TestTee(t *testing.T) {
	b := New(1 << 10)
	live := &failWriter{}
	w := b.Tee(live)
	for range 3 {
		if n, err := w.Write([]byte("abc")); n != 3 || err != nil {
			t.Fatalf("write: %d, %v", n, err)
		}
	}
	if got, _ := b.Bytes(); string(got) != "abcabcabc" || live.n != 9 {
		t.Fatalf("kept %q, live saw %d bytes", got, live.n)
	}
	if b.Tee(nil) != io.Writer(b) {
		t.Fatal("Tee(nil) is not the buffer itself")
	}
}
