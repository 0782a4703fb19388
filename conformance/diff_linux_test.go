package conformance

import (
	"bytes"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dryexec/dryexec/session"
)

// baseTree is the baseline most diff cases start from.
var baseTree = tree{
	"a.txt":   file("alpha\n"),
	"b.txt":   file("beta\n"),
	"run.sh":  fileMode("#!/bin/sh\necho run\n", 0o755),
	"d/x":     file("x\n"),
	"d/sub/y": file("y\n"),
}

// seeded opens a session whose baseline is baseTree.
func seeded(t *testing.T, open opener) *session.Session {
	t.Helper()
	s := openDefault(t, open)
	seed(t, s, baseTree)
	return s
}

// diffAfter runs command on a seeded session and checks the diff.
func diffAfter(command string, w want) func(t *testing.T, open opener) {
	return func(t *testing.T, open opener) {
		s := seeded(t, open)
		run(t, s, command)
		checkDiff(t, getDiff(t, s, false), w)
	}
}

var diffCases = []conformanceCase{
	// ---- nothing changed ----
	{"untouched_session_empty", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		checkEmpty(t, getDiff(t, s, false))
		checkEmpty(t, getDiff(t, s, false))
	}},
	{"reads_only_empty", diffAfter("cat a.txt d/x >/dev/null; ls -laR >/dev/null; find . -type f -exec cat {} + >/dev/null; stat a.txt >/dev/null; test -x run.sh", want{})},
	{"identical_rewrite_no_change", diffAfter("printf 'alpha\\n' > a.txt; cp b.txt /tmp/dryexec-conf-b.$$ && cat /tmp/dryexec-conf-b.$$ > b.txt; rm -f /tmp/dryexec-conf-b.$$", want{})},
	{"create_then_delete_no_change", diffAfter("echo t > tmpf; mkdir -p td/x; echo f > td/x/f; ln -s a.txt tl; rm -r tmpf td tl", want{})},
	{"touch_existing_no_change", diffAfter("touch a.txt run.sh d/x d/sub/y; touch -d '2001-01-01' b.txt", want{})},
	{"chmod_and_back_no_change", diffAfter("chmod 700 a.txt; chmod 644 a.txt", want{})},
	{"delete_and_recreate_same_no_change", diffAfter("rm a.txt; printf 'alpha\\n' > a.txt; rm -r d; mkdir -p d/sub; echo x > d/x; echo y > d/sub/y", want{})},

	// ---- writes ----
	{"write_new_file", diffAfter("printf hello > new.txt", want{writes: map[string]string{"new.txt": "hello"}})},
	{"write_empty_file", diffAfter("touch empty; : > a.txt", want{writes: map[string]string{"empty": "", "a.txt": ""}})},
	{"modify_file", diffAfter("echo more >> a.txt", want{writes: map[string]string{"a.txt": "alpha\nmore\n"}})},
	{"modify_in_subdir", diffAfter("echo Y > d/sub/y", want{writes: map[string]string{"d/sub/y": "Y\n"}})},
	{"file_in_new_nested_dir", diffAfter("mkdir -p n1/n2/n3 && echo deep > n1/n2/n3/f", want{writes: map[string]string{"n1/n2/n3/f": "deep\n"}})},
	// A diff is file-based: a new empty directory (however deep) is no change.
	{"empty_new_dir_reports_nothing", diffAfter("mkdir -p empty/deeper/deepest; mkdir d/emptysub", want{})},
	// So is a directory's mode.
	{"dir_chmod_reports_nothing", diffAfter("chmod 700 d; chmod 711 d/sub", want{})},
	{"hardlink_is_a_write", diffAfter("ln a.txt hl", want{writes: map[string]string{"hl": "alpha\n"}})},
	{"fifo_is_not_content", diffAfter("mkfifo pipe", want{})},
	{"special_names", diffAfter("printf 1 > 'sp ace'; printf 2 > 'ünïcødé'; printf 3 > \"$(printf 'new\\nline')\"; printf 4 > ./-dash; printf 5 > 'back\\slash'; printf 6 > \"$(printf 'tab\\tx')\"",
		want{writes: map[string]string{"sp ace": "1", "ünïcødé": "2", "new\nline": "3", "-dash": "4", `back\slash`: "5", "tab\tx": "6"}})},
	{"many_files", func(t *testing.T, open opener) {
		s := seeded(t, open)
		run(t, s, "mkdir many; i=0; while [ $i -lt 500 ]; do echo $i > many/f$i; i=$((i+1)); done")
		w := want{writes: map[string]string{}}
		for i := 0; i < 500; i++ {
			w.writes[fmt.Sprintf("many/f%d", i)] = fmt.Sprintf("%d\n", i)
		}
		checkDiff(t, getDiff(t, s, false), w)
	}},
	{"binary_content_exact", func(t *testing.T, open opener) {
		var b []byte
		for i := 0; i < 4; i++ {
			for c := 0; c < 256; c++ {
				b = append(b, byte(c))
			}
		}
		b = append(b, "\r\n\x00\x00end"...)
		src := hostFile(t, b)
		s := seeded(t, open)
		run(t, s, "cp "+quote(src)+" bin.dat")
		checkDiff(t, getDiff(t, s, false), want{writes: map[string]string{"bin.dat": string(b)}})
	}},
	{"three_mib_file_exact", func(t *testing.T, open opener) {
		b := make([]byte, 3<<20+17)
		r := rand.New(rand.NewPCG(1, 2))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		src := hostFile(t, b)
		s := seeded(t, open)
		run(t, s, "cp "+quote(src)+" big.bin")
		d := getDiff(t, s, false)
		if got := d.Writes["big.bin"]; !bytes.Equal(got, b) {
			t.Fatalf("big.bin: %d bytes, want %d (equal prefix %d)", len(got), len(b), commonPrefix(got, b))
		}
		checkDiff(t, d, want{writes: map[string]string{"big.bin": string(b)}})
	}},

	// ---- deletes ----
	{"delete_file", diffAfter("rm b.txt", want{deletes: []string{"b.txt"}})},
	{"deleted_dir_lists_each_file", diffAfter("rm -r d", want{deletes: []string{"d/sub/y", "d/x"}})},
	{"deleted_subdir_lists_each_file", diffAfter("rm -r d/sub", want{deletes: []string{"d/sub/y"}})},
	{"rename_is_delete_plus_write", diffAfter("mv a.txt c.txt", want{deletes: []string{"a.txt"}, writes: map[string]string{"c.txt": "alpha\n"}})},
	{"rename_dir", diffAfter("mv d e", want{deletes: []string{"d/sub/y", "d/x"}, writes: map[string]string{"e/x": "x\n", "e/sub/y": "y\n"}})},
	{"file_replaced_by_dir", diffAfter("rm -r d && echo f > d",
		want{deletes: []string{"d/sub/y", "d/x"}, writes: map[string]string{"d": "f\n"}})},
	// A directory emptied and refilled (opaque on the overlay): the old files
	// are deleted, the new one written.
	{"dir_recreated_with_other_files", diffAfter("rm -r d && mkdir d && echo z > d/z",
		want{deletes: []string{"d/sub/y", "d/x"}, writes: map[string]string{"d/z": "z\n"}})},

	// ---- modes ----
	{"chmod_adds_exec_bit", diffAfter("chmod 755 a.txt", want{modes: map[string]fs.FileMode{"a.txt": 0o755}})},
	{"chmod_removes_exec_bit", diffAfter("chmod 644 run.sh", want{modes: map[string]fs.FileMode{"run.sh": 0o644}})},
	// A chmod alone is a change by every measure: not empty, listed in
	// Paths, and carrying the mode to apply.
	{"chmod_only_is_not_empty", func(t *testing.T, open opener) {
		s := seeded(t, open)
		run(t, s, "chmod 700 b.txt")
		d := getDiff(t, s, false)
		checkDiff(t, d, want{modes: map[string]fs.FileMode{"b.txt": 0o700}})
		if d.Empty() || !slices.Equal(d.Paths(), []string{"b.txt"}) {
			t.Fatalf("a chmod-only diff: Empty %v, Paths %q", d.Empty(), d.Paths())
		}
	}},
	{"chmod_restricts", diffAfter("chmod 600 a.txt; chmod 444 b.txt", want{modes: map[string]fs.FileMode{"a.txt": 0o600, "b.txt": 0o444}})},
	{"setuid_stripped", diffAfter("chmod 4755 a.txt", want{modes: map[string]fs.FileMode{"a.txt": 0o755}})},
	{"setuid_on_exec_file_is_no_change", diffAfter("chmod 4755 run.sh", want{})},
	{"setuid_stripped_on_new_file", diffAfter("printf x > s && chmod 4755 s", want{writes: map[string]string{"s": "x"}, modes: map[string]fs.FileMode{"s": 0o755}})},
	{"new_file_mode", diffAfter("printf x > p && chmod 600 p; printf y > q && chmod 750 q", want{writes: map[string]string{"p": "x", "q": "y"}, modes: map[string]fs.FileMode{"p": 0o600, "q": 0o750}})},
	{"content_and_mode", diffAfter("echo z > a.txt; chmod 700 a.txt", want{writes: map[string]string{"a.txt": "z\n"}, modes: map[string]fs.FileMode{"a.txt": 0o700}})},

	// ---- symlinks ----
	{"symlink_reported_as_link", diffAfter("ln -s a.txt l; ln -s d/sub ld", want{links: map[string]string{"l": "a.txt", "ld": "d/sub"}})},
	{"dangling_symlink", diffAfter("ln -s nowhere/at/all dl", want{links: map[string]string{"dl": "nowhere/at/all"}})},
	// A change of kind is the old path deleted and the new thing made, so a
	// diff applied elsewhere removes the file before making the link.
	{"symlink_replaces_file", diffAfter("rm a.txt && ln -s b.txt a.txt", want{deletes: []string{"a.txt"}, links: map[string]string{"a.txt": "b.txt"}})},
	{"symlink_replaces_dir", diffAfter("rm -r d && ln -s /etc d", want{deletes: []string{"d/sub/y", "d/x"}, links: map[string]string{"d": "/etc"}})},
	{"symlink_retarget", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		seed(t, s, tree{"a": file("a"), "b": file("b"), "l": symlink("a")})
		run(t, s, "ln -sfn b l")
		checkDiff(t, getDiff(t, s, false), want{links: map[string]string{"l": "b"}})
	}},
	{"file_replaces_symlink", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		seed(t, s, tree{"a": file("a"), "l": symlink("a")})
		run(t, s, "rm l && echo f > l")
		checkDiff(t, getDiff(t, s, false), want{deletes: []string{"l"}, writes: map[string]string{"l": "f\n"}})
	}},
	{"delete_symlink", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		seed(t, s, tree{"a": file("a"), "l": symlink("a")})
		run(t, s, "rm l")
		checkDiff(t, getDiff(t, s, false), want{deletes: []string{"l"}})
	}},
	// Links out of the workspace are reported as links; the diff never follows
	// them into what they point at.
	{"symlink_outside_not_followed", diffAfter("ln -s /etc etc; ln -s / root; ln -s /etc/passwd pw; ln -s .. up",
		want{links: map[string]string{"etc": "/etc", "root": "/", "pw": "/etc/passwd", "up": ".."}})},
	// Writing through a baseline link that points outside is not a write of
	// the workspace (the link itself is unchanged), on either rung; on ns the
	// host's file is untouched too.
	{"write_through_symlink_not_reported", func(t *testing.T, open opener) {
		// Directly in /tmp: writable for any user, and (rootless) no ancestor
		// the sandbox would have to copy up.
		out, err := os.MkdirTemp("/tmp", "dryexec-conformance-out-")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.RemoveAll(out) })
		target := out + ".target"
		if err := os.WriteFile(target, []byte("host\n"), 0o666); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { os.Remove(target) })
		os.Chmod(out, 0o777)
		s := openDefault(t, open)
		seed(t, s, tree{"f": file("f\n"), "out": symlink(target), "outdir": symlink(out)})
		wantOut(t, s, "echo pwned > out && echo new > outdir/new && cat out outdir/new", "pwned\nnew\n")
		checkEmpty(t, getDiff(t, s, false))
		if rungOf(s) == "ns" {
			if b, _ := os.ReadFile(target); string(b) != "host\n" {
				t.Errorf("the host's %s became %q", target, b)
			}
			if _, err := os.Lstat(filepath.Join(out, "new")); err == nil {
				t.Errorf("the sandbox created %s/new on the host", out)
			}
		}
	}},

	// ---- rebase ----
	{"rebase_returns_changes_then_empty", func(t *testing.T, open opener) {
		s := seeded(t, open)
		run(t, s, "echo n > n; rm b.txt; chmod 755 a.txt; ln -s a.txt l")
		w := want{writes: map[string]string{"n": "n\n"}, deletes: []string{"b.txt"}, links: map[string]string{"l": "a.txt"}, modes: map[string]fs.FileMode{"a.txt": 0o755}}
		checkDiff(t, getDiff(t, s, true), w)
		checkEmpty(t, getDiff(t, s, false))
		checkEmpty(t, getDiff(t, s, true))
		// The workspace itself is unchanged by a rebase.
		wantOut(t, s, "cat n a.txt; test -e b.txt || echo no-b; stat -c %a a.txt; readlink l", "n\nalpha\nno-b\n755\na.txt\n")
	}},
	{"rebase_later_changes_relative", func(t *testing.T, open opener) {
		s := seeded(t, open)
		run(t, s, "echo n > n; rm b.txt; chmod 755 a.txt")
		getDiff(t, s, true)
		run(t, s, "echo more >> n; echo beta2 > b.txt; chmod 644 a.txt; rm run.sh")
		checkDiff(t, getDiff(t, s, false), want{
			writes:  map[string]string{"n": "n\nmore\n", "b.txt": "beta2\n"},
			deletes: []string{"run.sh"},
			modes:   map[string]fs.FileMode{"a.txt": 0o644},
		})
	}},
	{"rebase_then_reset_returns_to_rebased", func(t *testing.T, open opener) {
		s := seeded(t, open)
		run(t, s, "echo n > n; rm b.txt; chmod 755 a.txt")
		getDiff(t, s, true)
		run(t, s, "rm n; echo b > b.txt; chmod 600 a.txt; echo later > later")
		if err := s.Reset(ctx(t)); err != nil {
			t.Fatal(err)
		}
		checkEmpty(t, getDiff(t, s, false))
		wantOut(t, s, "cat n; test -e b.txt || echo no-b; test -e later || echo no-later; stat -c %a a.txt", "n\nno-b\nno-later\n755\n")
	}},
	{"rebase_deleted_dir_then_recreate", func(t *testing.T, open opener) {
		s := seeded(t, open)
		run(t, s, "rm -r d")
		getDiff(t, s, true)
		run(t, s, "mkdir d && echo new > d/x")
		checkDiff(t, getDiff(t, s, false), want{writes: map[string]string{"d/x": "new\n"}})
		wantOut(t, s, "find d | sort", "d\nd/x\n")
	}},
	{"rebase_recreated_dir", func(t *testing.T, open opener) {
		s := seeded(t, open)
		run(t, s, "rm -r d && mkdir d && echo z > d/z")
		getDiff(t, s, true)
		checkEmpty(t, getDiff(t, s, false))
		wantOut(t, s, "find d | sort", "d\nd/z\n")
		run(t, s, "echo x > d/x")
		checkDiff(t, getDiff(t, s, false), want{writes: map[string]string{"d/x": "x\n"}})
	}},
	{"rebase_twice_in_a_row", func(t *testing.T, open opener) {
		s := seeded(t, open)
		run(t, s, "echo 1 > one")
		checkDiff(t, getDiff(t, s, true), want{writes: map[string]string{"one": "1\n"}})
		run(t, s, "echo 2 > two; rm one")
		checkDiff(t, getDiff(t, s, true), want{writes: map[string]string{"two": "2\n"}, deletes: []string{"one"}})
		checkEmpty(t, getDiff(t, s, false))
	}},

	// ---- reset ----
	{"reset_restores_baseline", func(t *testing.T, open opener) {
		s := seeded(t, open)
		run(t, s, "echo new > new; mkdir -p nd/deep && echo z > nd/deep/z; rm b.txt; rm -r d; chmod 600 run.sh; chmod 4755 a.txt; echo changed > a.txt; ln -s x link")
		if err := s.Reset(ctx(t)); err != nil {
			t.Fatal(err)
		}
		checkEmpty(t, getDiff(t, s, false))
		wantOut(t, s, "find . | LC_ALL=C sort; cat a.txt b.txt d/x d/sub/y; stat -c '%n %a' a.txt b.txt run.sh",
			".\n./a.txt\n./b.txt\n./d\n./d/sub\n./d/sub/y\n./d/x\n./run.sh\nalpha\nbeta\nx\ny\na.txt 644\nb.txt 644\nrun.sh 755\n")
	}},
	{"reset_untouched_is_noop", func(t *testing.T, open opener) {
		s := seeded(t, open)
		if err := s.Reset(ctx(t)); err != nil {
			t.Fatal(err)
		}
		checkEmpty(t, getDiff(t, s, false))
		wantOut(t, s, "cat a.txt", "alpha\n")
	}},
	{"reset_empty_workspace", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		run(t, s, "echo x > x; mkdir y")
		if err := s.Reset(ctx(t)); err != nil {
			t.Fatal(err)
		}
		wantOut(t, s, "ls -A | wc -l", "0\n")
	}},
	// An exec whose cwd the reset removed starts at the workspace root.
	{"reset_moves_cwd_out_of_removed_dir", func(t *testing.T, open opener) {
		s := seeded(t, open)
		run(t, s, "mkdir -p newdir && cd newdir")
		if err := s.Reset(ctx(t)); err != nil {
			t.Fatal(err)
		}
		wantOut(t, s, "pwd", s.Info().Workspace+"\n")
	}},
	{"reset_keeps_cwd_and_env", func(t *testing.T, open opener) {
		s := seeded(t, open)
		run(t, s, "cd d/sub && export KEEP=1 && echo junk > junk")
		if err := s.Reset(ctx(t)); err != nil {
			t.Fatal(err)
		}
		wantOut(t, s, "pwd; echo $KEEP; ls", s.Info().Workspace+"/d/sub\n1\ny\n")
	}},
}

// skipBug marks a case that fails because of a known bug (see the message).

func commonPrefix(a, b []byte) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}
