package linuxns

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/wire"
)

func TestOwnedRoots(t *testing.T) {
	testreq.NeedRoot(t)
	const uid = 4242
	base := t.TempDir() // root's
	mine := filepath.Join(base, "mine")
	deep := filepath.Join(mine, "a", "b")
	theirsInMine := filepath.Join(mine, "theirs", "c")
	for _, d := range []string{deep, theirsInMine} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{mine, filepath.Dir(deep), deep, filepath.Dir(theirsInMine)} {
		if err := os.Chown(d, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	specs := []wire.MountSpec{{Path: "/"}, {Path: "/proc"}}
	for _, tc := range []struct {
		name  string
		paths []string
		want  []string
	}{
		{"deep_owned_path_roots_at_the_top_owned_dir", []string{deep}, []string{"/", "/proc", mine}},
		{"owned_dir_itself", []string{mine}, []string{"/", "/proc", mine}},
		{"someone_elses_dir_adds_nothing", []string{base}, []string{"/", "/proc"}},
		{"root_owned_dir_under_an_owned_one_adds_nothing", []string{theirsInMine}, []string{"/", "/proc"}},
		{"missing_path_adds_nothing", []string{filepath.Join(base, "nope")}, []string{"/", "/proc"}},
		{"relative_and_replaced_paths_add_nothing", []string{"rel/x", "/proc/self"}, []string{"/", "/proc"}},
		{"twice_is_once", []string{deep, mine}, []string{"/", "/proc", mine}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ownedRoots(slices.Clone(specs), uid, tc.paths...)
			var paths []string
			for _, s := range got {
				paths = append(paths, s.Path)
			}
			if !slices.Equal(paths, tc.want) {
				t.Errorf("got %v, want %v", paths, tc.want)
			}
		})
	}
}
