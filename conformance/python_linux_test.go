package conformance

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/dryexec/dryexec/internal/testwait"
	"github.com/dryexec/dryexec/session"

	"github.com/dryexec/dryexec/wire"
)

var pythonCases = []conformanceCase{
	{"trailing_expression_echo", func(t *testing.T, open opener) {
		s := open(t, session.Options{})
		for _, tc := range []struct{ code, transcript string }{
			{"1 + 1", "2\n"},
			{"'a' * 3", "'aaa'\n"},
			{"x = 5", ""},
			{"x = 5\nx", "5\n"},
			{"x = 1; x", "1\n"},
			{"None", ""},
			{"def f():\n    return None\nf()", ""},
			{"print('a')\n[1, 2]", "a\n[1, 2]\n"},
			{"import os", ""},
			{"for i in range(2):\n    i", ""},
			{"", ""},
		} {
			r := pyOK(t, s, tc.code, nil)
			if r.Transcript != tc.transcript {
				t.Errorf("Python(%q): transcript %q, want %q", tc.code, r.Transcript, tc.transcript)
			}
		}
	}},
	{"print_entries", func(t *testing.T, open opener) {
		s := open(t, session.Options{})
		r := pyOK(t, s, `import io, sys
print('hi', 3)
print()
print('a', 'b', sep='-', end='!')
print('é')
print('to a file', file=io.StringIO())
print('err', file=sys.stderr)
`, nil)
		want := []wire.PrintEntry{
			{Type: "str,int", Len: 4, Text: "hi 3"},
			{Type: "", Len: 0, Text: ""},
			{Type: "str,str", Len: 3, Text: "a-b"},
			{Type: "str", Len: 2, Text: "é"},
			{Type: "str", Len: 3, Text: "err"},
		}
		// The printed objects are the values group's (values_linux_test.go).
		got := slices.Clone(r.Prints)
		for i := range got {
			got[i].Objects = nil
		}
		if jsonOf(t, got) != jsonOf(t, want) {
			t.Errorf("prints %+v, want %+v", got, want)
		}
		if want := "hi 3\n\na-b!é\nerr\n"; r.Transcript != want {
			t.Errorf("transcript %q, want %q", r.Transcript, want)
		}
		if r.PrintsDropped != 0 {
			t.Errorf("dropped %d", r.PrintsDropped)
		}
	}},
	{"print_caps_and_exact_transcript", func(t *testing.T, open opener) {
		s := open(t, session.Options{})
		r := pyOK(t, s, "print('x' * 100000)\nfor i in range(1100):\n    print(i)", nil)
		if len(r.Prints) != 1000 || r.PrintsDropped != 101 {
			t.Fatalf("%d entries, %d dropped; want 1000 and 101", len(r.Prints), r.PrintsDropped)
		}
		first := r.Prints[0]
		if !first.Truncated || first.Len != 100000 || first.Text != strings.Repeat("x", 64<<10) || first.Type != "str" {
			t.Errorf("first entry: truncated %v len %d text of %d bytes type %q", first.Truncated, first.Len, len(first.Text), first.Type)
		}
		if last := r.Prints[999]; last.Text != "998" || last.Type != "int" || last.Truncated {
			t.Errorf("last entry %+v, want 998", last)
		}
		var want strings.Builder
		want.WriteString(strings.Repeat("x", 100000) + "\n")
		for i := range 1100 {
			fmt.Fprintf(&want, "%d\n", i)
		}
		if r.Transcript != want.String() {
			t.Errorf("transcript is not exact (%d bytes, want %d)", len(r.Transcript), want.Len())
		}
	}},
	{"print_total_cap", func(t *testing.T, open opener) {
		s := open(t, session.Options{})
		r := pyOK(t, s, "for i in range(20):\n    print('y' * 65536)", nil)
		// 16 entries of 64 KiB fill the 1 MiB total.
		if len(r.Prints) != 16 || r.PrintsDropped != 4 {
			t.Fatalf("%d entries, %d dropped; want 16 and 4", len(r.Prints), r.PrintsDropped)
		}
		// The transcript is the tail of the 20 × 64 KiB, within OutputCap.
		if len(r.Transcript) != 1<<20 || !strings.HasSuffix(r.Transcript, "y\n") {
			t.Errorf("transcript %d bytes, want the last 1 MiB", len(r.Transcript))
		}
	}},
	{"transcript_merges_streams_in_order", func(t *testing.T, open opener) {
		s := open(t, session.Options{})
		r := pyOK(t, s, `import os, sys, subprocess
print('1')
sys.stderr.write('2\n')
sys.stdout.write('3\n')
os.write(2, b'4\n')
subprocess.run(['/bin/echo', '5'])
print('6', file=sys.stderr)`, nil)
		if want := "1\n2\n3\n4\n5\n6\n"; r.Transcript != want {
			t.Errorf("transcript %q, want %q", r.Transcript, want)
		}
	}},
	{"transcript_keeps_tail_under_output_cap", func(t *testing.T, open opener) {
		s := open(t, session.Options{OutputCap: 1000})
		r := pyOK(t, s, "print('a' * 5000)\nprint('end')", nil)
		if len(r.Transcript) != 1000 || !strings.HasSuffix(r.Transcript, "a\nend\n") {
			t.Errorf("transcript %d bytes ending %q", len(r.Transcript), r.Transcript[max(0, len(r.Transcript)-10):])
		}
	}},
	{"large_transcript_and_values_cross", func(t *testing.T, open opener) {
		// Each is larger than a frame header: they ride as attachments.
		s := open(t, session.Options{})
		in := bytes.Repeat([]byte{1, 2, 3, 4}, 3<<17) // 1.5 MiB, 2 MiB in base64
		// 300 KiB of \x01 is 1.8 MiB of JSON (\u0001 each).
		r := pyOK(t, s, "import sys\nsys.stdout.write('\\x01' * (300 << 10))\nn = len(blob)\nout = blob[::-1]", map[string]wire.Value{"blob": session.Bytes(in)})
		if r.Transcript != strings.Repeat("\x01", 300<<10) {
			t.Errorf("transcript of %d bytes, want 300 KiB of \\x01", len(r.Transcript))
		}
		if got := output(t, r, "n"); got != strconv.Itoa(len(in)) {
			t.Errorf("n = %s", got)
		}
		rev := bytes.Clone(in)
		for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
			rev[i], rev[j] = rev[j], rev[i]
		}
		if o := r.Outputs["out"]; o.Type != "bytes" || !bytes.Equal(o.Bytes, rev) {
			t.Errorf("out: %s of %d bytes", o.Type, len(o.Bytes))
		}
	}},
	{"outputs_codec", func(t *testing.T, open opener) {
		s := open(t, session.Options{})
		r := pyOK(t, s, `import os, pathlib, sys
n = 1
f = 2.5
s = "str"
none = None
lst = [1, "a", None]
d = {"k": [1, {"x": True}]}
t = (1, 2)
b = b"\x00\xff"
ba = bytearray(b"ab")
p = pathlib.Path("sub/f.txt")
absp = pathlib.Path("/etc/hostname")
st = {1}
fh = open(os.devnull)
nan = float("nan")
intkeys = {1: "x"}
obj = object()
_private = 1
def fn():
    pass
class K:
    pass
lam = lambda: 1
mod = os
`, nil)
		wantJSON := map[string]string{
			"n": "1", "f": "2.5", "s": `"str"`, "none": "null", "lst": `[1,"a",null]`,
			"d": `{"k":[1,{"x":true}]}`, "t": "[1,2]",
		}
		for name, w := range wantJSON {
			if got := output(t, r, name); got != w {
				t.Errorf("output %s = %s, want %s", name, got, w)
			}
		}
		wantOther := map[string]wire.Value{
			"b":    session.Bytes([]byte{0, 0xff}),
			"ba":   session.Bytes([]byte("ab")),
			"p":    session.File("sub/f.txt"),
			"absp": session.File("/etc/hostname"),
		}
		for name, w := range wantOther {
			if got := r.Outputs[name]; jsonOf(t, got) != jsonOf(t, w) {
				t.Errorf("output %s = %s, want %s", name, jsonOf(t, got), jsonOf(t, w))
			}
		}
		if len(r.Outputs) != len(wantJSON)+len(wantOther) {
			t.Errorf("outputs %v: want exactly %d", r.Outputs, len(wantJSON)+len(wantOther))
		}
		wantSkipped := map[string]string{"st": "set", "fh": "TextIOWrapper", "nan": "float", "intkeys": "dict", "obj": "object"}
		if jsonOf(t, r.OutputsSkipped) != jsonOf(t, wantSkipped) {
			t.Errorf("skipped %v, want %v", r.OutputsSkipped, wantSkipped)
		}
	}},
	{"inputs_bound_as_globals", func(t *testing.T, open opener) {
		s := open(t, session.Options{})
		ws := s.Info().Workspace
		r := pyOK(t, s, "out = [a['x'], raw.hex(), str(path), type(path).__name__, nothing]", map[string]wire.Value{
			"a": session.JSON(map[string]any{"x": 1}), "raw": session.Bytes([]byte{0, 0xff}), "path": session.File("data/in.txt"),
			"nothing": session.JSON(nil),
		})
		if got, want := output(t, r, "out"), jsonOf(t, []any{1, "00ff", ws + "/data/in.txt", "PosixPath", nil}); got != want {
			t.Errorf("out = %s, want %s", got, want)
		}
		// A file input comes back as the same workspace-relative path.
		if p := r.Outputs["path"]; p.Type != "file" || p.Path != "data/in.txt" {
			t.Errorf("path output %+v", p)
		}
		if _, err := s.Python(ctx(t), "1", map[string]wire.Value{"bad": {Type: "pickle"}}, 0); err == nil {
			t.Errorf("an input of type pickle was accepted")
		}
		if r := py(t, s, "1", map[string]wire.Value{"not-an-identifier": session.JSON(1)}); r.OK || r.Error == nil || r.Error.Type != "ValueError" {
			t.Errorf("a bad input name: %+v", r.Error)
		}
	}},
	{"errors", func(t *testing.T, open opener) {
		s := open(t, session.Options{})
		for _, tc := range []struct {
			code, typ, msg string
			tb             []string // in the traceback, in order
		}{
			{"x = 1\n1/0", "ZeroDivisionError", "division by zero", []string{"Traceback (most recent call last):", `File "<exec>", line 2, in <module>`, "1/0", "ZeroDivisionError: division by zero"}},
			{"def f():\n    raise ValueError('bad value')\nf()", "ValueError", "bad value", []string{`line 3, in <module>`, `line 2, in f`, "raise ValueError('bad value')", "ValueError: bad value"}},
			{"1 +", "SyntaxError", "invalid syntax", []string{`File "<exec>", line 1`, "SyntaxError: invalid syntax"}},
			{"import sys\nsys.exit(3)", "SystemExit", "3", []string{"SystemExit: 3"}},
			{"raise KeyboardInterrupt", "KeyboardInterrupt", "", []string{"KeyboardInterrupt"}},
			{"{}['k']", "KeyError", "'k'", []string{"KeyError: 'k'"}},
		} {
			r := py(t, s, tc.code, nil)
			if r.OK || r.Error == nil {
				t.Errorf("Python(%q) succeeded", tc.code)
				continue
			}
			if r.Error.Type != tc.typ || !strings.Contains(r.Error.Message, tc.msg) {
				t.Errorf("Python(%q): error %s %q, want %s %q", tc.code, r.Error.Type, r.Error.Message, tc.typ, tc.msg)
			}
			tb := r.Error.Traceback
			for _, w := range tc.tb {
				i := strings.Index(tb, w)
				if i < 0 {
					t.Errorf("Python(%q): traceback lacks %q:\n%s", tc.code, w, r.Error.Traceback)
					break
				}
				tb = tb[i+len(w):]
			}
			if strings.Contains(r.Error.Traceback, "<string>") {
				t.Errorf("Python(%q): the runner's own frames are in the traceback:\n%s", tc.code, r.Error.Traceback)
			}
		}
		if r := py(t, s, "import sys\nsys.exit(0)", nil); !r.OK {
			t.Errorf("sys.exit(0): %+v", r.Error)
		}
		// Bindings made before the error still come back.
		if r := py(t, s, "y = 7\nraise RuntimeError('x')", nil); r.OK || output(t, r, "y") != "7" {
			t.Errorf("outputs of a failed exec: %v", r.Outputs)
		}
	}},
	{"timeout_kills_runner_not_session", func(t *testing.T, open opener) {
		s := open(t, session.Options{})
		start := time.Now()
		r, err := s.Python(ctx(t), `import os, subprocess, time
open('pids', 'w').write('%d %d' % (os.getpid(), subprocess.Popen(['sleep', '60']).pid))
print('started', flush=True)
time.sleep(60)`, nil, time.Second)
		if err != nil {
			t.Fatal(err)
		}
		if !r.TimedOut || r.OK || r.Error == nil || r.Error.Type != "TimeoutError" {
			t.Fatalf("timed out %v ok %v error %+v", r.TimedOut, r.OK, r.Error)
		}
		if d := time.Since(start); d > 20*time.Second {
			t.Errorf("the timeout took %v", d)
		}
		if r.Transcript != "started\n" || len(r.Prints) != 1 {
			t.Errorf("transcript %q, prints %v", r.Transcript, r.Prints)
		}
		// Killed is not yet reaped: wait (bounded) until neither process is
		// alive or a zombie.
		alive := `for i in $(seq 100); do
  left=""; for p in $(cat pids); do [ -e /proc/$p ] && ! grep -q '^State:.*Z' /proc/$p/status 2>/dev/null && left="$left $p"; done
  [ -z "$left" ] && exit 0; sleep 0.05
done; echo alive $left`
		if got := run(t, s, alive); got != "" {
			t.Errorf("left running after the timeout: %s", got)
		}
		if r := pyOK(t, s, "1 + 1", nil); r.Transcript != "2\n" {
			t.Errorf("next exec: %q", r.Transcript)
		}
	}},
	{"crash_keeps_what_was_printed", func(t *testing.T, open opener) {
		s := open(t, session.Options{})
		r := py(t, s, "print('before')\nimport os, sys\nsys.stderr.write('err\\n')\nos._exit(3)", nil)
		if r.OK || r.TimedOut || r.Error == nil || r.Error.Type != "RunnerCrash" || !strings.Contains(r.Error.Message, "status 3") {
			t.Fatalf("ok %v timed out %v error %+v", r.OK, r.TimedOut, r.Error)
		}
		if r.Transcript != "before\nerr\n" || len(r.Prints) != 1 || r.Prints[0].Text != "before" {
			t.Errorf("transcript %q, prints %v", r.Transcript, r.Prints)
		}
		r = py(t, s, "print('boom')\nimport ctypes\nctypes.string_at(0)", nil)
		if r.OK || r.Error == nil || r.Error.Type != "RunnerCrash" || !strings.Contains(r.Error.Message, "signal 11") {
			t.Errorf("segfault: ok %v error %+v", r.OK, r.Error)
		}
		if r.Transcript != "boom\n" {
			t.Errorf("segfault transcript %q", r.Transcript)
		}
		r = py(t, s, "import os\nos.write(3, b'not json\\n')\nimport time\ntime.sleep(30)", nil)
		if r.OK || r.Error == nil || r.Error.Type != "RunnerProtocolError" {
			t.Errorf("garbage on the runner's channel: ok %v error %+v", r.OK, r.Error)
		}
		pyOK(t, s, "1", nil)
	}},
	{"cwd_follows_the_shell", func(t *testing.T, open opener) {
		s := open(t, session.Options{})
		sr, err := s.Shell(ctx(t), "mkdir -p sub/deeper && cd sub", pyTimeout)
		if err != nil || sr.ExitCode != 0 {
			t.Fatalf("shell: %v %+v", err, sr)
		}
		r := pyOK(t, s, "import os, pathlib\np = pathlib.Path('x.txt')\nos.getcwd()", nil)
		if want := "'" + sr.Cwd + "'\n"; r.Transcript != want || filepath.Base(sr.Cwd) != "sub" {
			t.Errorf("python's cwd %q, want %q", r.Transcript, want)
		}
		if p := r.Outputs["p"]; p.Path != "sub/x.txt" {
			t.Errorf("a relative path in a subdirectory comes back as %+v, want sub/x.txt", p)
		}
		// Python's own chdir does not move the shell.
		pyOK(t, s, "import os\nos.chdir('deeper')", nil)
		if got := run(t, s, "pwd -P"); got != sr.Cwd+"\n" {
			t.Errorf("the shell's cwd after python's chdir: %q, want %q", got, sr.Cwd)
		}
		// The shell's environment is python's too.
		run(t, s, "export DX_FROM_SHELL=yes")
		if r := pyOK(t, s, "import os\nos.environ['DX_FROM_SHELL']", nil); r.Transcript != "'yes'\n" {
			t.Errorf("env: %q", r.Transcript)
		}
	}},
	{"files_shared_with_the_shell", func(t *testing.T, open opener) {
		s := open(t, session.Options{})
		run(t, s, "echo from-shell > a.txt")
		if r := pyOK(t, s, "open('a.txt').read()", nil); r.Transcript != "'from-shell\\n'\n" {
			t.Errorf("python reads %q", r.Transcript)
		}
		pyOK(t, s, "open('b.txt', 'w').write('from-python')", nil)
		if got := run(t, s, "cat b.txt"); got != "from-python" {
			t.Errorf("shell reads %q", got)
		}
		d, err := s.Diff(ctx(t), false)
		if err != nil {
			t.Fatal(err)
		}
		if string(d.Writes["b.txt"]) != "from-python" || string(d.Writes["a.txt"]) != "from-shell\n" || len(d.Writes) != 2 {
			t.Errorf("diff writes %v", d.Writes)
		}
	}},
	{"abandoned_exec_does_not_leak_into_the_next", func(t *testing.T, open opener) {
		s := open(t, session.Options{})
		ctx, cancel := context.WithTimeout(ctx(t), 300*time.Millisecond)
		defer cancel()
		_, err := s.Python(ctx, "import time\ntime.sleep(1.5)\ncache['late'] = 'x'", nil, 0)
		if err == nil {
			t.Fatal("an exec outliving its context returned no error")
		}
		r := pyOK(t, s, "cache.get('late')", nil)
		if r.Transcript != "" {
			t.Errorf("the abandoned exec's write is visible: %q", r.Transcript)
		}
		if _, ok := s.Cache().Get("late"); ok {
			t.Errorf("the abandoned exec's write reached the cache")
		}
	}},
	{"concurrent_shell_and_python", func(t *testing.T, open opener) {
		s := open(t, session.Options{})
		done := make(chan error, 1)
		go func() {
			_, err := s.Shell(ctx(t), "echo x", pyTimeout)
			done <- err
		}()
		pyOK(t, s, "import time\ntime.sleep(0.2)\ncache['a'] = 'b'\nemit('e', 1)", nil)
		if err := <-done; err != nil {
			t.Fatal(err)
		}
	}},
	{"close_ends_a_running_exec", func(t *testing.T, open opener) {
		s := open(t, session.Options{})
		mark := fmt.Sprintf("DX_MARK=%d-%d", time.Now().UnixNano(), len(t.Name()))
		run(t, s, "export "+mark)
		done := make(chan error, 1)
		go func() {
			_, err := s.Python(context.Background(), "import time\ntime.sleep(60)", nil, 0)
			done <- err
		}()
		waitFor(t, "the runner to start", func() bool { return len(marked(mark)) > 0 })
		s.Close()
		if err := <-done; err == nil {
			t.Errorf("Python returned no error from a closed session")
		}
		waitFor(t, "the runner to end", func() bool { return len(marked(mark)) == 0 })
	}},
}

// marked lists live (not zombie) processes whose environment holds mark.
func marked(mark string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		env, err := os.ReadFile(fmt.Sprintf("/proc/%d/environ", pid))
		if err != nil || !bytes.Contains(env, []byte(mark)) {
			continue
		}
		if st, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
			if i := bytes.LastIndexByte(st, ')'); i > 0 && i+2 < len(st) && st[i+2] == 'Z' {
				continue
			}
		}
		pids = append(pids, pid)
	}
	return pids
}

// waitFor polls cond for up to 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.For(t, 10*time.Second, what, cond)
}
