package render

import (
	"bytes"
	"testing"
)

// TestLiveWriter: to a terminal, a command's live output cannot steer it
// (escapes, C1, bidi, bad bytes shown escaped; CR as a newline) whatever
// way it is cut into writes, and text, tabs, newlines and runes cut between
// writes come through whole; to a file, the bytes are the command's.
func TestLiveWriter(t *testing.T) {
	tests := []struct {
		name   string
		chunks []string
		escape bool
		want   string
	}{
		{"plain", []string{"one\n", "two\tx\n"}, true, "one\ntwo\tx\n"},
		{"escape sequences", []string{"\x1b]0;owned\x07\x1b[2Jok\n"}, true, `\x1b]0;owned\x07\x1b[2Jok` + "\n"},
		{"C1 CSI and bidi", []string{"a\u009b2Jb\u202ec\n"}, true, `a\u009b2Jb\u202ec` + "\n"},
		{"CR overwrites nothing", []string{"secret\rpublic\n"}, true, "secret\npublic\n"},
		{"CRLF is one newline", []string{"a\r\nb\r", "\nc"}, true, "a\nb\nc"},
		{"rune cut between writes", []string{"caf\xc3", "\xa9 \xe2\x82", "\xac\n"}, true, "café €\n"},
		{"cut rune never completed", []string{"x\xe2\x82"}, true, `x\xe2\x82`},
		{"not UTF-8", []string{"\xff\xfe\n"}, true, `\xff\xfe` + "\n"},
		{"raw to a file", []string{"\x1b[31mred\r\n", "\xc3"}, false, "\x1b[31mred\r\n\xc3"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var b bytes.Buffer
			l := NewLiveWriter(&b, tt.escape)
			for _, c := range tt.chunks {
				if n, err := l.Write([]byte(c)); n != len(c) || err != nil {
					t.Fatalf("Write: %d, %v", n, err)
				}
			}
			if err := l.Flush(); err != nil {
				t.Fatal(err)
			}
			if b.String() != tt.want {
				t.Errorf("got %q, want %q", b.String(), tt.want)
			}
		})
	}
}
