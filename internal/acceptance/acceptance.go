// Package acceptance holds the core trial's acceptance scenario (the command, the
// tree it runs in, and the exact delta it must give), shared by the rung's tests,
// the CLI's tests and the rootless test, so that all of them check the same thing.
package acceptance

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/dryexec/dryexec"
)

// Script is the command of the core issue's acceptance test.
const Script = `echo new > a.txt; echo more >> keep.txt; rm gone.txt; chmod 755 s.sh; mkdir d; rm -r sub; echo t > /tmp/probe.$$; touch -m keep.txt`

// MakeDir lays out the scenario's files in dir.
func MakeDir(dir string) error {
	for name, content := range map[string]string{"keep.txt": "keep\n", "gone.txt": "gone\n", "s.sh": "echo hi\n", "sub/x": "x\n"} {
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// OpPath is one change, reduced to what the scenario pins down.
type OpPath struct{ Op, Path string }

// OpPaths lists d's changes sorted by path then op.
func OpPaths(d *dryexec.StateDelta) []OpPath {
	var out []OpPath
	for _, f := range d.Files {
		out = append(out, OpPath{string(f.Op), f.Path})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path+out[i].Op < out[j].Path+out[j].Op })
	return out
}

// Check returns an error unless d is exactly the scenario's delta for dir and the
// host has none of its changes.
func Check(d *dryexec.StateDelta, dir string) error {
	var probe string
	for _, f := range d.Files {
		if strings.HasPrefix(f.Path, "/tmp/probe.") {
			probe = f.Path
		}
	}
	if probe == "" {
		return fmt.Errorf("no /tmp/probe.* in delta: %v", OpPaths(d))
	}
	want := []OpPath{
		{"create", probe}, {"create", dir + "/a.txt"}, {"mkdir", dir + "/d"},
		{"delete", dir + "/gone.txt"}, {"modify", dir + "/keep.txt"}, {"chmod", dir + "/s.sh"},
		{"rmdir", dir + "/sub"}, {"delete", dir + "/sub/x"},
	}
	sort.Slice(want, func(i, j int) bool { return want[i].Path+want[i].Op < want[j].Path+want[j].Op })
	if got := OpPaths(d); fmt.Sprint(got) != fmt.Sprint(want) {
		return fmt.Errorf("delta files:\n got %v\nwant %v", got, want)
	}
	for _, f := range d.Files {
		switch f.Path {
		case dir + "/keep.txt":
			if !strings.Contains(f.Diff, "+more") || f.BeforeSHA256 == "" || f.SHA256 == f.BeforeSHA256 {
				return fmt.Errorf("keep.txt change lacks diff or hashes: %+v", f)
			}
		case dir + "/s.sh":
			if f.Mode != "0755" || f.BeforeMode != "0644" {
				return fmt.Errorf("s.sh chmod: %+v", f)
			}
		}
	}
	if d.Totals.FilesChanged != 8 || d.Totals.FilesDeleted != 3 {
		return fmt.Errorf("totals: %+v", d.Totals)
	}
	// The host has none of it.
	if _, err := os.Stat(probe); err == nil {
		return fmt.Errorf("%s exists on the host", probe)
	}
	for _, p := range []string{"a.txt", "d"} {
		if _, err := os.Lstat(filepath.Join(dir, p)); err == nil {
			return fmt.Errorf("%s exists on the host", p)
		}
	}
	for _, p := range []string{"gone.txt", "sub/x"} {
		if _, err := os.Lstat(filepath.Join(dir, p)); err != nil {
			return fmt.Errorf("%s is gone from the host", p)
		}
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "keep.txt")); string(b) != "keep\n" {
		return fmt.Errorf("keep.txt changed on the host: %q", b)
	}
	if st, err := os.Stat(filepath.Join(dir, "s.sh")); err != nil || st.Mode().Perm() != 0o644 {
		return fmt.Errorf("s.sh mode changed on the host")
	}
	return nil
}
