package fsdelta

import (
	"strings"
	"testing"
)

// TestDiffHeaderNames: a file's unified diff names it in its ---/+++ lines.
// A name holding a newline (or CR, ESC, a bidi override) split that header, so
// the command's choice of name wrote diff lines of its own ("+ created
// /etc/evil") above the real hunk, in the delta's `diff` field and in every
// renderer of it. Such a name is quoted, as git quotes it.
func TestDiffHeaderNames(t *testing.T) {
	for _, name := range []string{
		"/w/a\n+ created \u2215etc\u2215evil",
		"/w/a\n@@ -0,0 +1 @@\n+harmless",
		"/w/b\r--- a/w/other",
		"/w/c\x1b[2K\x1b[1Aevil",
		"/w/d\u202etxt.exe",
		"/w/e\"quoted\\",
		"/w/f\xff\xfe",
	} {
		for _, hadOld := range []bool{false, true} {
			d := unifiedDiff(name, []byte("old\n"), []byte("new\n"), hadOld)
			lines := strings.Split(strings.TrimSuffix(d, "\n"), "\n")
			if len(lines) != 5 && !(hadOld && len(lines) == 6) {
				t.Errorf("%q: the diff has %d lines, want one header each and the hunk:\n%s", name, len(lines), d)
				continue
			}
			for _, l := range lines[:2] {
				if strings.ContainsAny(l, "\r\x1b\u202e") || !strings.HasPrefix(l, "--- ") && !strings.HasPrefix(l, "+++ ") {
					t.Errorf("%q: header line %q", name, l)
				}
			}
			if want := `+++ "b/w/`; !strings.HasPrefix(lines[1], want) {
				t.Errorf("%q: header %q, want it quoted (%s…)", name, lines[1], want)
			}
		}
	}
	// A plain name stays as it was.
	if d := unifiedDiff("/w/plain name.txt", []byte("a\n"), []byte("b\n"), true); !strings.HasPrefix(d, "--- a/w/plain name.txt\n+++ b/w/plain name.txt\n") {
		t.Errorf("plain name: %q", d)
	}
}
