package guest

import (
	"reflect"
	"strings"
	"testing"
)

// TestFollowFIFOs: where runsc's strace says the command made FIFOs, and
// where the renames after it moved them, in lines as gVisor's strace
// prints them (TestFIFOsReachTheDelta in rung/gvisor runs the real thing).
func TestFollowFIFOs(t *testing.T) {
	const pre = "I1204 20:48:24.450899       1 strace.go:610] [   2:   2] "
	x := func(comm, call string) string { return pre + comm + " X " + call + " = 0 (0x0) (51.217µs)" }
	for _, c := range []struct {
		name     string
		lines    []string
		want     [][]string
		unplaced bool
		lost     int
	}{
		{name: "mknodat in the cwd, in a dir fd, absolute, with odd names",
			lines: []string{
				x("mkfifo", "mknodat(AT_FDCWD /w, 0x7ea70aca79e6 a b, S_IFIFO|0o600, 0x0)"),
				x("python3", "mknodat(0x3 /w/d, 0x7ed8 q, S_IFIFO|0o640, 0x0)"),
				x("tar", "mknodat(AT_FDCWD /w, 0x7ed8 /abs/f, S_IFIFO|0o644, 0x0)"),
				x("sh", "mknodat(AT_FDCWD /w, 0x7ed8 sub/../c, S_IFIFO|0o644, 0x0)"),
				// Not FIFOs, or failed: nothing.
				x("python3", "mknodat(AT_FDCWD /w, 0x7ed8 r, S_IFREG|0o600, 0x0)"),
				pre + "mkfifo X mknodat(AT_FDCWD /w, 0x7ea7 e, S_IFIFO|0o600, 0x0) = 0 (0x0) errno=17 (file exists) (5µs)",
				pre + "mkfifo E mknodat(AT_FDCWD /w, 0x7ea7 e, S_IFIFO|0o600, 0x0)",
			},
			want: [][]string{{"/w/a b"}, {"/w/d/q"}, {"/abs/f"}, {"/w/c"}}},
		{name: "a task in a child pid namespace (the command's)",
			lines: []string{
				"I1204 20:48:24.450899       1 strace.go:610] [  12(   3):  12(   3)] mkfifo X mknodat(AT_FDCWD /w, 0x7ea7 n, S_IFIFO|0o600, 0x0) = 0 (0x0) (5µs)",
			},
			want: [][]string{{"/w/n"}}},
		{name: "renameat2 in the cwd, and of its directory; renameat with another dir fd is unplaced",
			lines: []string{
				x("mkfifo", "mknodat(AT_FDCWD /w, 0x1 r, S_IFIFO|0o600, 0x0)"),
				x("mv", "renameat2(AT_FDCWD /w, 0x2 r, 0xffffff9c, 0x3 sub/r2, 0x1)"),
				x("mkfifo", "mknodat(AT_FDCWD /w, 0x1 e/q, S_IFIFO|0o600, 0x0)"),
				x("mv", "renameat2(AT_FDCWD /w, 0x2 e, 0xffffff9c, 0x3 e2, 0x0)"),
				x("x", "renameat(0x5 /w, 0x2 z, 0x6, 0x3 z2)"),
			},
			want: [][]string{{"/w/sub/r2"}, {"/w/e2/q"}}, unplaced: true},
		{name: "exchange",
			lines: []string{
				x("mkfifo", "mknodat(AT_FDCWD /w, 0x1 a, S_IFIFO|0o600, 0x0)"),
				x("x", "renameat2(AT_FDCWD /w, 0x2 a, 0xffffff9c, 0x3 b, 0x2)"),
			},
			want: [][]string{{"/w/b"}}},
		{name: "rename(2): absolute moves, relative keeps every place it could have moved it to",
			lines: []string{
				x("mkfifo", "mknodat(AT_FDCWD /w, 0x1 a, S_IFIFO|0o600, 0x0)"),
				x("python3", "rename(0x2 /w/a, 0x3 /w/b)"),
				x("mkfifo", "mknodat(AT_FDCWD /w, 0x1 e/f/q, S_IFIFO|0o600, 0x0)"),
				x("python3", "rename(0x2 e, 0x3 e2)"),
				x("python3", "rename(0x2 unrelated, 0x3 other)"),
			},
			want: [][]string{{"/w/b"}, {"/w/e/f/q", "/w/e2/f/q"}}},
		{name: "a relative rename with .. and a relative mknod(2) cannot be placed",
			lines: []string{
				x("mkfifo", "mknodat(AT_FDCWD /w, 0x1 a, S_IFIFO|0o600, 0x0)"),
				x("python3", "rename(0x2 ../w/a, 0x3 b)"),
				x("old", "mknod(0x2 rel, S_IFIFO|0o600, 0x0)"),
			},
			want: [][]string{{"/w/a"}}, unplaced: true, lost: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			got, unplaced, lost := followFIFOs(strings.Join(c.lines, "\n") + "\n")
			if !reflect.DeepEqual(got, c.want) || unplaced != c.unplaced || len(lost) != c.lost {
				t.Errorf("got %q, unplaced %v, lost %q; want %q, %v, %d", got, unplaced, lost, c.want, c.unplaced, c.lost)
			}
		})
	}
}
