package render

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/fatih/color"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/testreq"
)

// fullDelta has one FileChange of each op kind, output on both streams, a
// violation, network entries and a decision.
func fullDelta() *dryexec.StateDelta {
	return &dryexec.StateDelta{
		Schema:  dryexec.SchemaV1,
		TrialID: "tr_01",
		Rung:    "ns",
		Action: dryexec.Action{
			Argv: []string{"sh", "-c", "echo hi > /w/new.txt; it's"},
			Cwd:  "/w",
		},
		Process: dryexec.Process{
			ExitCode:   0,
			Stdout:     "hello\n\tworld\n",
			Stderr:     "warn: x",
			DurationNS: 3_200_000,
		},
		Files: []dryexec.FileChange{
			{Path: "/w/new.txt", Op: dryexec.OpCreate, Kind: dryexec.KindFile, Size: 3, Mode: "0644",
				Diff: "--- /dev/null\n+++ b/w/new.txt\n@@ -0,0 +1 @@\n+hi\n"},
			{Path: "/w/conf.ini", Op: dryexec.OpModify, Kind: dryexec.KindFile, Size: 10, Mode: "0644",
				Diff: "--- a/w/conf.ini\n+++ b/w/conf.ini\n@@ -1,2 +1,2 @@\n-a=1\n+a=2\n b=3\n"},
			{Path: "/w/old.log", Op: dryexec.OpDelete, Kind: dryexec.KindFile, Size: 99, Mode: "0644"},
			{Path: "/w/run.sh", Op: dryexec.OpChmod, Kind: dryexec.KindFile, Mode: "0755", BeforeMode: "0644"},
			{Path: "/w/bin", Op: dryexec.OpChmod, Kind: dryexec.KindDir, Mode: "0700"},
			{Path: "/w/sub", Op: dryexec.OpMkdir, Kind: dryexec.KindDir, Mode: "0755"},
			{Path: "/w/gone", Op: dryexec.OpRmdir, Kind: dryexec.KindDir, Mode: "0755"},
			{Path: "/w/link", Op: dryexec.OpSymlink, Kind: dryexec.KindSymlink, LinkTarget: "../etc/passwd"},
		},
		Network: []dryexec.NetworkEvent{
			{Proto: "https", Method: "GET", URL: "https://api.x/v1/y", Host: "api.x", Port: 443,
				Status: 200, Action: "mocked"},
			{Proto: "tcp", Host: "10.0.0.1", Port: 22, Action: "blocked", Reason: "not in allowlist"},
		},
		Violations: []dryexec.Violation{
			{Kind: "syscall", Detail: "ptrace denied", PID: 42, Exe: "/usr/bin/gdb"},
		},
		Decision: dryexec.Decision{Choice: "review", RiskScore: 0.42,
			Reasons: []string{"deletes a file", "network blocked"}},
	}
}

const fullWant = `trial tr_01 (ns): $ sh -c 'echo hi > /w/new.txt; it'\''s' → exit 0 in 3.2ms
stdout:
  hello
  	world
stderr:
  warn: x
8 files changed (3 created, 3 modified, 2 deleted, 13 bytes written)
  + /w/new.txt
    --- /dev/null
    +++ b/w/new.txt
    @@ -0,0 +1 @@
    +hi
  ~ /w/conf.ini
    --- a/w/conf.ini
    +++ b/w/conf.ini
    @@ -1,2 +1,2 @@
    -a=1
    +a=2
     b=3
  - /w/old.log
  m /w/run.sh  0644 → 0755
  m /w/bin/  → 0700
  + /w/sub/
  - /w/gone/
  + /w/link -> ../etc/passwd
violations (1):
  syscall: ptrace denied (pid 42, /usr/bin/gdb)
network (2):
  mocked  https GET https://api.x/v1/y → 200
  blocked tcp 10.0.0.1:22 (not in allowlist)
decision: review (risk 0.42)
  - deletes a file
  - network blocked
commit: dryexec commit tr_01   discard: dryexec discard tr_01
`

func summary(t *testing.T, d *dryexec.StateDelta, opt Options) string {
	t.Helper()
	var b bytes.Buffer
	if err := Summary(&b, d, opt); err != nil {
		t.Fatalf("Summary: %v", err)
	}
	return b.String()
}

func TestSummaryExact(t *testing.T) {
	tests := []struct {
		name string
		d    func() *dryexec.StateDelta
		want string
	}{
		{"every op kind", fullDelta, fullWant},
		{
			name: "minimal: no output, no files, no decision",
			d: func() *dryexec.StateDelta {
				return &dryexec.StateDelta{TrialID: "tr_02", Rung: "host",
					Action:  dryexec.Action{Argv: []string{"true"}},
					Process: dryexec.Process{DurationNS: 850}}
			},
			want: "trial tr_02 (host, no isolation): $ true → exit 0 in 850ns\n" +
				"0 files changed (0 created, 0 modified, 0 deleted, 0 bytes written)\n" +
				"commit: dryexec commit tr_02   discard: dryexec discard tr_02\n",
		},
		{
			name: "non-zero exit, one file, truncated output",
			d: func() *dryexec.StateDelta {
				return &dryexec.StateDelta{TrialID: "tr_03", Rung: "ns",
					Action: dryexec.Action{Argv: []string{"make", ""}},
					Process: dryexec.Process{ExitCode: 2, DurationNS: 1_250_000_000,
						Stdout: "tail", StdoutTruncated: true, Stderr: "err\n", StderrTruncated: true},
					Files: []dryexec.FileChange{{Path: "/a", Op: dryexec.OpCreate, Kind: dryexec.KindFile, Size: 1}}}
			},
			want: "trial tr_03 (ns): $ make '' → exit 2 in 1.25s\n" +
				"stdout (truncated, tail kept):\n  tail\n" +
				"stderr (truncated, tail kept):\n  err\n" +
				"1 file changed (1 created, 0 modified, 0 deleted, 1 byte written)\n" +
				"  + /a\n" +
				"commit: dryexec commit tr_03   discard: dryexec discard tr_03\n",
		},
		{
			// Touched paths are no change: counted apart, not listed.
			name: "touched",
			d: func() *dryexec.StateDelta {
				return &dryexec.StateDelta{TrialID: "tr_07", Rung: "ns",
					Action:  dryexec.Action{Argv: []string{"make"}},
					Process: dryexec.Process{DurationNS: 850},
					Files:   []dryexec.FileChange{{Path: "/w/new.o", Op: dryexec.OpCreate, Kind: dryexec.KindFile, Size: 2}},
					Touched: []dryexec.FileChange{
						{Path: "/w/util.o", Op: dryexec.OpTouch, Kind: dryexec.KindFile, Size: 9, MtimeNS: 2},
						{Path: "/w/util.h", Op: dryexec.OpTouch, Kind: dryexec.KindFile, Size: 3, MtimeNS: 2},
						{Path: "/w", Op: dryexec.OpTouch, Kind: dryexec.KindDir, MtimeNS: 2},
					}}
			},
			want: "trial tr_07 (ns): $ make → exit 0 in 850ns\n" +
				"1 file changed (1 created, 0 modified, 0 deleted, 2 bytes written)\n" +
				"  + /w/new.o\n" +
				"3 touched (mtime only)\n" +
				"commit: dryexec commit tr_07   discard: dryexec discard tr_07\n",
		},
		{
			name: "signal",
			d: func() *dryexec.StateDelta {
				return &dryexec.StateDelta{TrialID: "tr_04", Rung: "vm",
					Action:  dryexec.Action{Argv: []string{"sleep", "9"}},
					Process: dryexec.Process{ExitCode: -1, Signal: "SIGKILL", DurationNS: 12_500}}
			},
			want: "trial tr_04 (vm): $ sleep 9 → killed by signal SIGKILL after 12.5µs\n" +
				"0 files changed (0 created, 0 modified, 0 deleted, 0 bytes written)\n" +
				"commit: dryexec commit tr_04   discard: dryexec discard tr_04\n",
		},
		{
			name: "timeout",
			d: func() *dryexec.StateDelta {
				return &dryexec.StateDelta{TrialID: "tr_05", Rung: "ns",
					Action:  dryexec.Action{Argv: []string{"sleep", "999"}},
					Process: dryexec.Process{Signal: "SIGKILL", TimedOut: true, DurationNS: 123_400_000_000}}
			},
			want: "trial tr_05 (ns): $ sleep 999 → timed out after 2m3s\n" +
				"0 files changed (0 created, 0 modified, 0 deleted, 0 bytes written)\n" +
				"commit: dryexec commit tr_05   discard: dryexec discard tr_05\n",
		},
		{
			// A blocked trial's summary offers no commit command.
			name: "blocked",
			d: func() *dryexec.StateDelta {
				return &dryexec.StateDelta{TrialID: "tr_06", Rung: "ns",
					Action:   dryexec.Action{Argv: []string{"true"}},
					Process:  dryexec.Process{DurationNS: 850},
					Decision: dryexec.Decision{Choice: "block", RiskScore: 1, Reasons: []string{"block: touches a denied target: /etc/x (/etc/**)"}}}
			},
			want: "trial tr_06 (ns): $ true → exit 0 in 850ns\n" +
				"0 files changed (0 created, 0 modified, 0 deleted, 0 bytes written)\n" +
				"decision: block (risk 1.00)\n" +
				"  - block: touches a denied target: /etc/x (/etc/**)\n" +
				"blocked: the policy forbids committing this (see the reasons)   discard: dryexec discard tr_06\n",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := summary(t, tt.d(), Options{})
			if got != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s", got, tt.want)
			}
		})
	}
}

func TestColorOnlyWhenAsked(t *testing.T) {
	const esc = "\x1b["
	tests := []struct {
		color bool
		want  []string // substrings that must appear
	}{
		{false, nil},
		{true, []string{
			"\x1b[32m+hi\x1b[0m",              // + line green
			"\x1b[31m-a=1\x1b[0m",             // - line red
			"\x1b[36m@@ -1,2 +1,2 @@\x1b[0m",  // hunk cyan
			"\x1b[1m--- a/w/conf.ini\x1b[22m", // header bold, not red
		}},
	}
	for _, tt := range tests {
		got := summary(t, fullDelta(), Options{Color: tt.color})
		if !tt.color {
			if strings.Contains(got, "\x1b") {
				t.Errorf("Color=false: output has an escape: %q", got)
			}
			if got != fullWant {
				t.Errorf("Color=false: output differs from the exact text:\n%s", got)
			}
			continue
		}
		if !strings.Contains(got, esc) {
			t.Fatalf("Color=true: no colour codes in %q", got)
		}
		for _, w := range tt.want {
			if !strings.Contains(got, w) {
				t.Errorf("Color=true: missing %q in\n%q", w, got)
			}
		}
		// The unchanged context line stays plain.
		if !strings.Contains(got, "\n     b=3\n") {
			t.Errorf("Color=true: context line coloured: %q", got)
		}
	}
}

// Colour is decided by Options only: fatih/color's global switch and NO_COLOR in
// the process's environment change nothing, and Summary leaves the global alone.
func TestColorIgnoresGlobals(t *testing.T) {
	t.Setenv("NO_COLOR", "1")
	saved := color.NoColor
	t.Cleanup(func() { color.NoColor = saved })

	color.NoColor = true
	if got := summary(t, fullDelta(), Options{Color: true}); !strings.Contains(got, "\x1b[32m") {
		t.Errorf("Color=true with global NoColor=true: no colour")
	}
	color.NoColor = false
	if got := summary(t, fullDelta(), Options{}); strings.Contains(got, "\x1b") {
		t.Errorf("Color=false with global NoColor=false: colour present")
	}
	if color.NoColor != false {
		t.Errorf("Summary changed color.NoColor")
	}
}

func TestDiffCut(t *testing.T) {
	var diff strings.Builder
	diff.WriteString("--- a/f\n+++ b/f\n@@ -1,300 +1,300 @@\n")
	for i := 0; i < 300; i++ {
		fmt.Fprintf(&diff, "+line %d\n", i)
	}
	d := &dryexec.StateDelta{TrialID: "tr_c", Rung: "ns", Action: dryexec.Action{Argv: []string{"gen"}},
		Files: []dryexec.FileChange{{Path: "/f", Op: dryexec.OpModify, Kind: dryexec.KindFile, Size: 1, Diff: diff.String()}}}
	diffLines := func(out string) (n int, last string) {
		for _, l := range strings.Split(out, "\n") {
			if strings.HasPrefix(l, "    ") {
				n++
				last = l
			}
		}
		return n, last
	}
	tests := []struct {
		name      string
		max       int
		wantLines int // diff lines printed, including the note
		wantLast  string
	}{
		{"explicit 5", 5, 6, "    … diff cut after 5 lines (298 more lines)"},
		{"default 200", 0, 201, "    … diff cut after 200 lines (103 more lines)"},
		{"no limit", -1, 303, "    +line 299"},
		{"limit equals length", 303, 303, "    +line 299"},
		{"one over", 302, 303, "    … diff cut after 302 lines (1 more line)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out := summary(t, d, Options{MaxDiffLines: tt.max})
			n, last := diffLines(out)
			if n != tt.wantLines || last != tt.wantLast {
				t.Errorf("got %d lines ending %q, want %d ending %q", n, last, tt.wantLines, tt.wantLast)
			}
			if !strings.HasSuffix(out, "commit: dryexec commit tr_c   discard: dryexec discard tr_c\n") {
				t.Errorf("summary does not continue after the cut diff:\n%s", out)
			}
		})
	}
}

func TestControlCharactersEscaped(t *testing.T) {
	tests := []struct {
		name   string
		modify func(d *dryexec.StateDelta)
		want   []string
	}{
		{
			name: "path with ESC, CR, newline and C1 CSI",
			modify: func(d *dryexec.StateDelta) {
				d.Files = []dryexec.FileChange{{Path: "/w/\x1b]0;pwned\x07x\r\n  + /etc/ok\u009b2J", Op: dryexec.OpCreate, Kind: dryexec.KindFile}}
			},
			want: []string{`  + /w/\x1b]0;pwned\x07x\r\n  + /etc/ok\u009b2J` + "\n"},
		},
		{
			name: "stdout and stderr with colour, clear screen, backspace, bidi",
			modify: func(d *dryexec.StateDelta) {
				d.Process.Stdout = "ok\x1b[2J\x1b[31mred\b\x7f\ttab\nline2\r\n"
				d.Process.Stderr = "a\u202eb\xff\x9b"
			},
			want: []string{
				"stdout:\n  ok\\x1b[2J\\x1b[31mred\\x08\\x7f\ttab\n  line2\\r\n",
				"stderr:\n  a\\u202eb\\xff\\x9b\n",
			},
		},
		{
			name: "symlink target, diff, argv, network, violation, reasons, id",
			modify: func(d *dryexec.StateDelta) {
				d.TrialID = "tr_\x1bx"
				d.Action.Argv = []string{"echo", "\x1b[8m"}
				d.Files = []dryexec.FileChange{{Path: "/l", Op: dryexec.OpSymlink, Kind: dryexec.KindSymlink,
					LinkTarget: "/t\x1b", Diff: "+\x1b[1A\n"}}
				d.Network = []dryexec.NetworkEvent{{Action: "blocked", URL: "http://x/\x1b"}}
				d.Violations = []dryexec.Violation{{Kind: "path", Detail: "\x1bP", Exe: "/e\x1b"}}
				d.Decision = dryexec.Decision{Choice: "block", Reasons: []string{"r\x1b"}}
			},
			want: []string{
				`trial tr_\x1bx (ns): $ echo '\x1b[8m'`,
				`  + /l -> /t\x1b` + "\n",
				`    +\x1b[1A` + "\n",
				`http://x/\x1b`,
				`path: \x1bP (/e\x1b)`,
				`  - r\x1b`,
				`dryexec discard 'tr_\x1bx'`,
			},
		},
	}
	for _, tt := range tests {
		for _, col := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/color=%v", tt.name, col), func(t *testing.T) {
				d := fullDelta()
				tt.modify(d)
				out := summary(t, d, Options{Color: col})
				if col {
					// Colour adds our SGR sequences and nothing else, so an
					// injected sequence cannot pass for one of ours.
					plain := summary(t, d, Options{})
					if got := stripSGR(out); got != plain {
						t.Fatalf("coloured output without its SGR codes:\n%q\ndiffers from plain:\n%q", got, plain)
					}
				} else {
					for _, w := range tt.want {
						if !strings.Contains(out, w) {
							t.Errorf("missing %q in\n%s", w, out)
						}
					}
				}
				// Whatever the colour setting, the only raw ESC allowed is the
				// start of one of our own SGR sequences ("\x1b[" digits ";"… "m"),
				// and no other control character (but \n, \t) or C1 may appear.
				for i, r := range out {
					switch {
					case r == '\n' || r == '\t':
					case r == 0x1b:
						if !col || !isOurSGR(out[i:]) {
							t.Fatalf("raw ESC at %d: %q", i, out[max(0, i-20):min(len(out), i+20)])
						}
					case r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f || r == utf8.RuneError:
						t.Fatalf("raw control %U at %d: %q", r, i, out)
					}
				}
			})
		}
	}
}

// stripSGR removes every ESC [ digits/semicolons m sequence from s.
func stripSGR(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); {
		if isOurSGR(s[i:]) {
			i += strings.IndexByte(s[i:], 'm') + 1
			continue
		}
		b.WriteByte(s[i])
		i++
	}
	return b.String()
}

// isOurSGR reports whether s starts with ESC [ digits/semicolons m.
func isOurSGR(s string) bool {
	if !strings.HasPrefix(s, "\x1b[") {
		return false
	}
	for i := 2; i < len(s); i++ {
		switch c := s[i]; {
		case c == 'm':
			return i > 2
		case c >= '0' && c <= '9' || c == ';':
		default:
			return false
		}
	}
	return false
}

func TestClean(t *testing.T) {
	tests := []struct {
		in, field, line string
	}{
		{"plain /a/b é ü 日本", "plain /a/b é ü 日本", "plain /a/b é ü 日本"},
		{"a\tb", `a\tb`, "a\tb"},
		{"a\nb", `a\nb`, `a\nb`},
		{"\x00\x01\x1b\x7f", `\x00\x01\x1b\x7f`, `\x00\x01\x1b\x7f`},
		{"\u0085\u009b\u009d", `\u0085\u009b\u009d`, `\u0085\u009b\u009d`},
		{"\x9b\xc3", `\x9b\xc3`, `\x9b\xc3`},
		{"x\u202ey\u2066z\u200f", `x\u202ey\u2066z\u200f`, `x\u202ey\u2066z\u200f`},
		{`back\slash`, `back\slash`, `back\slash`},
	}
	for _, tt := range tests {
		if got := cleanField(tt.in); got != tt.field {
			t.Errorf("cleanField(%q) = %q, want %q", tt.in, got, tt.field)
		}
		if got := cleanLine(tt.in); got != tt.line {
			t.Errorf("cleanLine(%q) = %q, want %q", tt.in, got, tt.line)
		}
	}
	if got, want := clean("a\nb\tc\rd", true, true), "a\nb\tc\\rd"; got != want {
		t.Errorf("clean keeping \\n and \\t = %q, want %q", got, want)
	}
}

func TestHumanDuration(t *testing.T) {
	tests := []struct {
		ns   int64
		want string
	}{
		{0, "0ns"}, {850, "850ns"}, {12_500, "12.5µs"}, {3_200_000, "3.2ms"},
		{3_000_000, "3ms"}, {999_940_000, "999.9ms"}, {1_250_000_000, "1.25s"},
		{59_000_000_000, "59s"}, {123_400_000_000, "2m3s"},
	}
	for _, tt := range tests {
		if got := humanDuration(time.Duration(tt.ns)); got != tt.want {
			t.Errorf("humanDuration(%d) = %q, want %q", tt.ns, got, tt.want)
		}
	}
}

func TestShellJoin(t *testing.T) {
	tests := []struct {
		argv []string
		want string
	}{
		{nil, ""},
		{[]string{"ls", "-la", "/tmp/a_b.c"}, "ls -la /tmp/a_b.c"},
		{[]string{"sh", "-c", "a b"}, "sh -c 'a b'"},
		{[]string{"echo", "it's", ""}, `echo 'it'\''s' ''`},
		{[]string{"echo", "$HOME", "*"}, "echo '$HOME' '*'"},
	}
	for _, tt := range tests {
		if got := shellJoin(tt.argv); got != tt.want {
			t.Errorf("shellJoin(%q) = %q, want %q", tt.argv, got, tt.want)
		}
	}
}

func TestColorWanted(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(); w.Close() })

	env := func(m map[string]string) func(string) string {
		return func(k string) string { return m[k] }
	}
	tty := openTTY(t) // nil when this system cannot make one

	tests := []struct {
		name string
		f    *os.File
		env  map[string]string
		want bool
	}{
		{"pipe", w, map[string]string{"TERM": "xterm-256color"}, false},
		{"nil file", nil, map[string]string{"TERM": "xterm"}, false},
		{"tty, NO_COLOR set", tty, map[string]string{"TERM": "xterm", "NO_COLOR": "1"}, false},
		{"tty, TERM=dumb", tty, map[string]string{"TERM": "dumb"}, false},
		{"tty, NO_COLOR empty", tty, map[string]string{"TERM": "xterm", "NO_COLOR": ""}, true},
		{"tty", tty, map[string]string{"TERM": "xterm"}, true},
		{"pipe, NO_COLOR set", w, map[string]string{"TERM": "xterm", "NO_COLOR": "1"}, false},
		{"pipe, TERM=dumb", w, map[string]string{"TERM": "dumb"}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.f == nil && strings.HasPrefix(tt.name, "tty") {
				testreq.Needf(t, testreq.Kernel, "pseudo-terminal", errors.New("no pseudo-terminal available"))
			}
			if got := ColorWanted(tt.f, env(tt.env)); got != tt.want {
				t.Errorf("ColorWanted = %v, want %v", got, tt.want)
			}
		})
	}
}

// failWriter fails after n bytes.
type failWriter struct{ n int }

func (f *failWriter) Write(p []byte) (int, error) {
	if len(p) > f.n {
		return 0, errors.New("disk full")
	}
	f.n -= len(p)
	return len(p), nil
}

func TestSummaryErrors(t *testing.T) {
	if err := Summary(&failWriter{n: 100}, fullDelta(), Options{}); err == nil || err.Error() != "disk full" {
		t.Errorf("write error: got %v, want disk full", err)
	}
	if err := Summary(&bytes.Buffer{}, nil, Options{}); err == nil {
		t.Errorf("nil delta: no error")
	}
}

// TestNoCommands: for an agent acting through MCP tools the summary ends
// with the decision, offering no CLI command (blocked or not).
func TestNoCommands(t *testing.T) {
	for _, choice := range []string{"auto_commit", "review", "block"} {
		t.Run(choice, func(t *testing.T) {
			d := &dryexec.StateDelta{TrialID: "tr_09", Rung: "ns", Action: dryexec.Action{Argv: []string{"true"}},
				Decision: dryexec.Decision{Choice: choice, Reasons: []string{"r"}}}
			out := summary(t, d, Options{NoCommands: true})
			if strings.Contains(out, "dryexec ") || !strings.HasSuffix(out, "  - r\n") {
				t.Errorf("summary:\n%s", out)
			}
		})
	}
}

// TestSummaryOwner: an owner change shows as chown says it, alone or with the
// mode, never as a bare "m" line that hides it.
func TestSummaryOwner(t *testing.T) {
	own := func(f dryexec.FileChange, huid, hgid int) dryexec.FileChange {
		f.SetBeforeOwner(huid, hgid)
		return f
	}
	d := &dryexec.StateDelta{TrialID: "tr_07", Rung: "ns", Action: dryexec.Action{Argv: []string{"chown", "65534", "f"}},
		Files: []dryexec.FileChange{
			own(dryexec.FileChange{Path: "/w/f", Op: dryexec.OpChmod, Kind: dryexec.KindFile, Mode: "0644", BeforeMode: "0644", UID: 65534}, 0, 0),
			own(dryexec.FileChange{Path: "/w/g", Op: dryexec.OpChmod, Kind: dryexec.KindFile, Mode: "0600", BeforeMode: "0644", UID: 1, GID: 2}, 0, 0),
		}}
	got := summary(t, d, Options{})
	for _, want := range []string{"m /w/f  owner 0:0 → 65534:0\n", "m /w/g  0644 → 0600  owner 0:0 → 1:2\n"} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
}
