package fsdelta

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/fswalk"
)

// pstate is what the delta's contract says about one path, and its mtime.
type pstate struct {
	kind     dryexec.Kind
	mode     uint32
	uid, gid int
	sha      string
	size     int64
	link     string
	mtime    int64
}

// same reports whether a and b are one state but for the mtime.
func (a pstate) same(b pstate) bool { a.mtime = b.mtime; return a == b }

// pathStates reads every path below root (not root itself), relative to it.
func pathStates(t testing.TB, root string) map[string]pstate {
	t.Helper()
	out := map[string]pstate{}
	err := filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		s := pstate{mode: st.Mode & 07777, uid: int(st.Uid), gid: int(st.Gid), mtime: st.Mtim.Nano()}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			s.kind, s.sha, s.size = dryexec.KindFile, sha(string(b)), int64(len(b))
		case unix.S_IFDIR:
			s.kind = dryexec.KindDir
		case unix.S_IFLNK:
			l, err := os.Readlink(p)
			if err != nil {
				return err
			}
			s.kind, s.link, s.mode, s.size = dryexec.KindSymlink, l, 0o777, int64(len(l))
		case unix.S_IFIFO:
			s.kind = dryexec.KindFIFO
		default:
			s.kind = dryexec.KindOther
		}
		rel, _ := filepath.Rel(root, p)
		out[rel] = s
		return nil
	})
	must(t, err)
	return out
}

// ageTree sets the mtime of every path below root (root too) to one long past.
func ageTree(t testing.TB, root string) {
	t.Helper()
	ts := unix.NsecToTimespec(time.Date(2020, 1, 2, 3, 4, 5, 6, time.UTC).UnixNano())
	must(t, filepath.WalkDir(root, func(p string, _ fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		return unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{ts, ts}, unix.AT_SYMLINK_NOFOLLOW)
	}))
}

// checkTouched checks the touched list against what the merged view shows:
// exactly the paths that the lower has in the same state (kind, mode, owner,
// content, link target) but with another mtime (a dir: a later one), and that
// have no change of their own, each with the view's mtime and the lower's as before. want, when
// not nil, must be those paths, in order.
func checkTouched(t testing.TB, lower string, changes, touched []dryexec.FileChange, before, view map[string]pstate, want []string) {
	t.Helper()
	changed := map[string]bool{}
	for _, c := range changes {
		changed[strings.TrimPrefix(c.Path, lower+"/")] = true
	}
	var oracle []string
	for rel, v := range view {
		if b, ok := before[rel]; ok && b.same(v) && b.mtime != v.mtime && !changed[rel] && v.kind != dryexec.KindOther &&
			(v.kind != dryexec.KindDir || v.mtime > b.mtime) {
			oracle = append(oracle, rel)
		}
	}
	slices.Sort(oracle)
	var got []string
	for _, c := range touched {
		rel := strings.TrimPrefix(c.Path, lower+"/")
		got = append(got, rel)
		v, b := view[rel], before[rel]
		w := dryexec.FileChange{Path: c.Path, Op: dryexec.OpTouch, Kind: v.kind, Mode: fmt.Sprintf("%04o", v.mode), UID: v.uid, GID: v.gid,
			SHA256: v.sha, Size: v.size, LinkTarget: v.link, MtimeNS: v.mtime, BeforeMtimeNS: b.mtime}
		if c != w {
			t.Errorf("touched %s:\n got %+v\nwant %+v", dryexec.QuotePath(rel), c, w)
		}
	}
	if !slices.Equal(got, oracle) {
		t.Errorf("touched %q; the merged view has these in the lower's state with another mtime: %q", got, oracle)
	}
	if want != nil && !slices.Equal(got, want) {
		t.Errorf("touched %q, want %q", got, want)
	}
}

// TestTouched: a path whose mtime alone moved (touch, identical bytes
// written in place or as a new file, a rebuild, a temp file made and removed
// in a dir, a symlink made again) is in the touched list, with the mtime the
// command left and the host's, and not among the changes; a copy-up that
// keeps the mtime, and a path whose owner moved too, are not. Root and
// rootless overlays alike.
func TestTouched(t *testing.T) {
	rootOrSkip(t)
	lowerNodes := append(with(
		dir("mk", 0o755),
		file("mk/util.h", "#define X 1\n", 0o644),
		file("mk/util.o", "\x7fELF object\n", 0o644),
		file("mk/hello", "\x7fELF program\n", 0o755),
		link("ln", "a.txt"),
		fifo("p", 0o600),
		dir("quiet", 0o755),
		file("quiet/q", "q\n", 0o644),
	), dir("e", 0o700))
	cases := []ovCase{
		{
			// A file or FIFO to any other time; a dir to a later one.
			name:    "touch",
			do:      func(f fsops) { f.touch("a.txt"); f.touchLater("d"); f.touch("p") },
			touched: []string{"a.txt", "d", "p"},
		},
		{
			// A host dir whose mtime is earlier in the sandbox is what a
			// dir copied up before the host changed it looks like: not
			// reported (see touchOf), nor is a dir merely copied up.
			name:    "dir set to an earlier mtime",
			do:      func(f fsops) { f.touch("d"); f.write("quiet/q", "q2\n") },
			want:    []wc{wModify("quiet/q", "q\n", "q2\n", "0644", "0644", "-q", "+q2")},
			touched: []string{},
		},
		{
			// sed -i without a match: a new file with the same bytes and
			// mode renamed over the old one.
			name: "sed -i rewriting identical bytes",
			do: func(f fsops) {
				f.write("d/.sedXYZ", "bee\n")
				f.rename("d/.sedXYZ", "d/b.txt")
			},
			touched: []string{"d", "d/b.txt"},
		},
		{
			// make: the header touched, the object and the program rebuilt
			// with the same bytes (the linker unlinks and creates).
			name: "identical rebuild",
			do: func(f fsops) {
				f.touch("mk/util.h")
				f.write("mk/util.o", "\x7fELF object\n")
				f.remove("mk/hello")
				must(f.t, os.WriteFile(f.p("mk/hello"), []byte("\x7fELF program\n"), 0o755))
			},
			touched: []string{"mk", "mk/hello", "mk/util.h", "mk/util.o"},
		},
		{
			name:    "temp file made and removed in a host dir",
			do:      func(f fsops) { f.write("quiet/.tmp", "t"); f.remove("quiet/.tmp") },
			touched: []string{"quiet"},
		},
		{
			name:    "symlink made again with the same target",
			do:      func(f fsops) { f.remove("ln"); f.symlink("a.txt", "ln") },
			touched: []string{"ln"},
		},
		{
			// Copied up (a chmod to the same mode, an open for writing),
			// with the mtime overlayfs preserves: nothing.
			name: "copied up only",
			do: func(f fsops) {
				f.chmod("a.txt", 0o644)
				w, err := os.OpenFile(f.p("quiet/q"), os.O_RDWR, 0)
				must(f.t, err)
				must(f.t, w.Close())
				f.chmod("e", 0o700)
			},
			touched: []string{},
		},
		{
			// Another owner is more than an mtime: a chmod that moves the
			// owner, not a touch.
			name:    "rewritten and chowned",
			do:      func(f fsops) { f.write("a.txt", "one\ntwo\n"); f.chown("a.txt", 1234, 1234) },
			want:    []wc{wChmod("a.txt", "one\ntwo\n", "0644", "0644").by(1234, 1234).from(os.Geteuid(), os.Getegid())},
			touched: []string{},
		},
		{
			// A modified file and a new one are changes, not touches; their
			// dir, whose mtime moved, is touched.
			name: "changes beside",
			do:   func(f fsops) { f.write("d/b.txt", "bee!\n"); f.write("d/new", "n\n") },
			want: []wc{
				wModify("d/b.txt", "bee\n", "bee!\n", "0644", "0644", "-bee", "+bee!"),
				wCreate("d/new", "n\n", "0644", "+n"),
			},
			touched: []string{"d"},
		},
		{
			// The host file now has a second name: it is in the delta (a
			// link group), not touched.
			name:    "hard link to a host file",
			do:      func(f fsops) { f.link("quiet/q", "d/q2") },
			want:    []wc{wCreate("d/q2", "q\n", "0644", "+q"), wModify("quiet/q", "q\n", "q\n", "0644", "0644")},
			groups:  [][]string{{"d/q2", "quiet/q"}},
			touched: []string{"d"},
		},
	}
	for _, mode := range overlayModes[:2] {
		t.Run(mode.name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					c.lower, c.oldTimes = lowerNodes, true
					runOverlayCase(t, c, mode.opts, fswalk.WalkOptions{UserXattr: mode.userXattr})
				})
			}
		})
	}
}

// TestTouchedStaleDir: a host dir copied up in the sandbox keeps the mtime
// it had then; if the host changes the dir afterwards (a busy /tmp), the
// sandbox's mtime is the older one and must not be reported as a touch,
// which commit would set back on the host. The control: the same trial
// without the host's change reports the dir (its entries changed).
func TestTouchedStaleDir(t *testing.T) {
	rootOrSkip(t)
	for _, mode := range overlayModes[:2] {
		for _, hostChanged := range []bool{false, true} {
			t.Run(fmt.Sprintf("%s/host changed %v", mode.name, hostChanged), func(t *testing.T) {
				lower := tempDir(t) + "/lower"
				must(t, os.Mkdir(lower, 0o755))
				buildTree(t, lower, baseLower)
				ageTree(t, lower)
				o := mountOverlay(t, lower, mode.opts)
				f := fsops{t, o.merged}
				f.write("d/new", "n\n")
				o.unmount()
				if hostChanged {
					later := time.Now().Add(time.Hour)
					must(t, os.Chtimes(lower+"/d", later, later))
				}
				_, touched, _ := diffUpperAll(t, o.upper, lower, fswalk.WalkOptions{UserXattr: mode.userXattr}, diffMax)
				var got []string
				for _, c := range touched {
					got = append(got, strings.TrimPrefix(c.Path, lower+"/"))
				}
				want := []string{"d"}
				if hostChanged {
					want = nil
				}
				if !slices.Equal(got, want) {
					t.Errorf("touched %q, want %q", got, want)
				}
			})
		}
	}
}
