package render

import (
	"bytes"
	"strings"
	"sync"
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

// TestLiveWriterPairOneWriter: a command's stdout and stderr, copied by two
// goroutines into one writer that is not safe for concurrent use (run --json
// sends both to stderr), arrive whole, each write intact (go test -race
// fails without the pair's shared lock).
func TestLiveWriterPairOneWriter(t *testing.T) {
	var b bytes.Buffer
	out, errw := NewLiveWriterPair(&b, true, &b, true)
	const n = 2000
	var wg sync.WaitGroup
	for _, w := range []*LiveWriter{out, errw} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				w.Write([]byte("line\n"))
			}
		}()
	}
	wg.Wait()
	if got := strings.Count(b.String(), "line\n"); got != 2*n || b.Len() != 2*n*len("line\n") {
		t.Fatalf("%d whole lines of %d, %d bytes", got, 2*n, b.Len())
	}
}
