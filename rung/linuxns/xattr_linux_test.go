package linuxns

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/testreq"
)

// xattrSet is one xattr the sandboxed command tries to set.
type xattrSet struct{ path, name, value string }

// setXattrsScript returns a shell snippet that tries to set each xattr from
// inside the sandbox and prints "set PATH" or "refused PATH ..." for each, or ""
// when the host has neither python3 nor setfattr.
func setXattrsScript(xs []xattrSet) string {
	if _, err := os.Stat("/usr/bin/python3"); err == nil {
		var py strings.Builder
		py.WriteString("import os\nfor p, n, v in (")
		for _, x := range xs {
			fmt.Fprintf(&py, "(%q, %q, %q), ", x.path, x.name, x.value)
		}
		py.WriteString("):\n  try:\n    os.setxattr(p, n, v.encode(), follow_symlinks=False); print('set', p)\n" +
			"  except OSError as e:\n    print('refused', p, e.errno)\n")
		return "/usr/bin/python3 -c " + shellQuote(py.String())
	}
	if _, err := exec.LookPath("setfattr"); err == nil {
		var sh strings.Builder
		for _, x := range xs {
			v := ""
			if x.value != "" {
				v = " -v " + shellQuote(x.value)
			}
			fmt.Fprintf(&sh, "if setfattr -h -n %s%s %s; then echo set %s; else echo refused %s; fi; ",
				shellQuote(x.name), v, shellQuote(x.path), x.path, x.path)
		}
		return sh.String()
	}
	return ""
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// A command may set user.overlay.* xattrs on files it owns: as root the overlay
// uses trusted.* and does not guard the user.* names. Forged whiteout and opaque
// markers must not turn into deletions of host files in the delta.
func TestForgedOverlayXattrsDeleteNothing(t *testing.T) {
	requireNS(t)
	dir := t.TempDir()
	for name, content := range map[string]string{
		"victim-empty": "", "victim": "precious\n", "vdir/a": "a\n", "vdir/sub/b": "b\n",
	} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	xs := []xattrSet{
		{"victim-empty", "user.overlay.whiteout", ""},
		{"victim", "user.overlay.whiteout", ""},
		{"vdir", "user.overlay.opaque", "y"},
		{"newdir", "user.overlay.opaque", "y"},
		{"newdir/gone", "user.overlay.whiteout", ""},
	}
	set := setXattrsScript(xs)
	if set == "" {
		testreq.Need(t, testreq.Python, errors.New("neither /usr/bin/python3 nor setfattr to set xattrs with"))
	}
	before := snapshot(t, dir)
	// touch copies the empty host file up unchanged; ": >" truncates the other
	// one to the zero size of an xattr whiteout.
	script := "touch victim-empty; : > victim; touch vdir/new; mkdir newdir; touch newdir/gone; " + set
	d := runTrial(t, dir, dryexec.TrialSpec{}, "sh", "-c", script)
	if d.Process.ExitCode != 0 {
		t.Fatalf("exit %d: %s", d.Process.ExitCode, d.Process.Stderr)
	}
	for _, f := range d.Files {
		if f.Op == dryexec.OpDelete || f.Op == dryexec.OpRmdir {
			t.Errorf("forged xattr reported as a deletion: %s %s", f.Op, f.Path)
		}
	}
	got := map[string]dryexec.Op{}
	for _, f := range d.Files {
		if rel, ok := strings.CutPrefix(f.Path, dir+"/"); ok {
			got[rel] = f.Op
		}
	}
	want := map[string]dryexec.Op{
		"victim": dryexec.OpModify, "vdir/new": dryexec.OpCreate,
		"newdir": dryexec.OpMkdir, "newdir/gone": dryexec.OpCreate,
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("changes under the work dir:\n got %v\nwant %v", got, want)
	}
	sameSnapshot(t, before, snapshot(t, dir))
	if os.Getuid() == 0 && strings.Count(d.Process.Stdout, "set ") != len(xs) {
		// As root the overlay uses trusted.*, and user.* xattrs on the scratch
		// tmpfs need Linux 6.6; without them there was no attack to refuse.
		testreq.Needf(t, testreq.Kernel, "user xattrs on tmpfs", fmt.Errorf("the command could not set every xattr (no attack made): %s", d.Process.Stdout))
	}
	t.Logf("command: %s", strings.TrimSpace(d.Process.Stdout))
}
