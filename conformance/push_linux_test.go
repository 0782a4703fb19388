package conformance

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/dryexec/dryexec/session"
)

// pushTree is a tree with every kind of entry a push carries.
var pushTree = tree{
	"run.sh":         fileMode("#!/bin/sh\necho hi\n", 0o755),
	"secret":         fileMode("s\n", 0o600),
	"ro":             fileMode("r\n", 0o444),
	"sub":            dirMode(0o750),
	"sub/a.txt":      file("a\n"),
	"sub/deeper/b":   file("b\n"),
	"emptyd":         dirMode(0o755),
	"link":           symlink("run.sh"),
	"sub/up":         symlink("../secret"),
	"abs":            symlink("/etc/hostname"),
	"dangling":       symlink("no/such"),
	"sub/deeper/.hd": file("hidden\n"),
}

// pushTreeListing is what `listing` prints for pushTree.
const pushTreeListing = `. directory 755
./abs symbolic link -> /etc/hostname
./dangling symbolic link -> no/such
./emptyd directory 755
./link symbolic link -> run.sh
./ro regular file 444
./run.sh regular file 755
./secret regular file 600
./sub directory 750
./sub/a.txt regular file 644
./sub/deeper directory 755
./sub/deeper/.hd regular file 644
./sub/deeper/b regular file 644
./sub/up symbolic link -> ../secret
`

// listing prints every entry of the workspace with its type and mode (or
// link target), run from the workspace root.
const listing = `cd "$HOME" 2>/dev/null; find . | LC_ALL=C sort | while IFS= read -r p; do
  if [ -L "$p" ]; then echo "$p symbolic link -> $(readlink "$p")"; else stat -c '%n %F %a' "$p"; fi
done`

func pushed(t *testing.T, open opener) *session.Session {
	t.Helper()
	s := openDefault(t, open)
	run(t, s, "echo old > old; mkdir -p od/x && echo o > od/x/f; cp /dev/null run.sh")
	seed(t, s, pushTree)
	return s
}

var pushCases = []conformanceCase{
	// The pushed tree replaces the workspace: old files are gone, the new tree
	// is there with its modes and symlinks (links are not followed).
	{"pushdir_replaces_workspace", func(t *testing.T, open opener) {
		s := pushed(t, open)
		wantOut(t, s, listing, pushTreeListing)
		wantOut(t, s, "cat run.sh sub/a.txt sub/deeper/b sub/up", "#!/bin/sh\necho hi\na\nb\ns\n")
	}},
	{"pushdir_becomes_baseline", func(t *testing.T, open opener) {
		s := pushed(t, open)
		checkEmpty(t, getDiff(t, s, false))
		run(t, s, "echo changed > secret; rm -r sub; chmod 755 ro; echo n > n")
		if err := s.Reset(ctx(t)); err != nil {
			t.Fatal(err)
		}
		checkEmpty(t, getDiff(t, s, false))
		wantOut(t, s, listing, pushTreeListing)
	}},
	{"pushdir_diff_relative_to_push", func(t *testing.T, open opener) {
		s := pushed(t, open)
		run(t, s, "echo more >> sub/a.txt; rm secret")
		checkDiff(t, getDiff(t, s, false), want{writes: map[string]string{"sub/a.txt": "a\nmore\n"}, deletes: []string{"secret"}})
	}},
	{"pushdir_resets_cwd", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		run(t, s, "mkdir -p sub/deeper && cd sub/deeper")
		seed(t, s, pushTree)
		r := sh(t, s, "pwd")
		if ws := s.Info().Workspace; r.Stdout != ws+"\n" || r.Cwd != ws {
			t.Fatalf("pwd %q, Cwd %q; want the workspace root %s", r.Stdout, r.Cwd, ws)
		}
	}},
	{"pushdir_keeps_env", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		run(t, s, "export KEEP=1")
		seed(t, s, tree{"f": file("f")})
		wantOut(t, s, "echo $KEEP", "1\n")
	}},
	{"pushdir_strips_setuid", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		seed(t, s, tree{"su": fileMode("x", 0o4755), "sg": fileMode("y", 0o2750)})
		wantOut(t, s, "stat -c '%n %a' su sg", "su 755\nsg 750\n")
	}},
	{"pushdir_large_binary_exact", func(t *testing.T, open opener) {
		b := make([]byte, 3<<20+5)
		r := rand.New(rand.NewPCG(3, 4))
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		sum := sha256.Sum256(b)
		s := openDefault(t, open)
		seed(t, s, tree{"big.bin": file(string(b)), "small": file("s")})
		wantOut(t, s, "sha256sum < big.bin | cut -d' ' -f1; wc -c < big.bin", hex.EncodeToString(sum[:])+"\n"+fmt.Sprint(len(b))+"\n")
	}},
	{"pushdir_twice", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		seed(t, s, tree{"first": file("1")})
		run(t, s, "echo dirty > dirty; echo 2 > first")
		seed(t, s, tree{"second": file("2")})
		wantOut(t, s, "ls -A", "second\n")
		checkEmpty(t, getDiff(t, s, false))
	}},
	{"pushtar_names_normalised", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		err := s.PushTar(ctx(t), bytes.NewReader(makeTar(t,
			tarEntry{name: "./", typ: tar.TypeDir, mode: 0o755},
			tarEntry{name: "./top", data: "t"},
			tarEntry{name: "./dir/", typ: tar.TypeDir, mode: 0o700},
			tarEntry{name: "dir//g", data: "g"},
			tarEntry{name: "dir/./h", data: "h"},
		)))
		if err != nil {
			t.Fatal(err)
		}
		wantOut(t, s, "find . -type f | LC_ALL=C sort; stat -c %a dir; cat top dir/g dir/h", "./dir/g\n./dir/h\n./top\n700\ntgh")
		checkEmpty(t, getDiff(t, s, false))
	}},
	// Tars often carry files without entries for their parent directories
	// (tar -cf x.tar a/b/c, Python's tarfile.add of files): the parents are
	// created.
	{"pushtar_implied_parents", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		err := s.PushTar(ctx(t), bytes.NewReader(makeTar(t,
			tarEntry{name: "implied/parents/f", data: "f"},
			tarEntry{name: "top", data: "t"},
		)))
		if err != nil {
			t.Fatal(err)
		}
		wantOut(t, s, "find . | LC_ALL=C sort; cat implied/parents/f", ".\n./implied\n./implied/parents\n./implied/parents/f\n./top\nf")
		checkEmpty(t, getDiff(t, s, false))
	}},
	{"pushtar_empty_tar_empties_workspace", func(t *testing.T, open opener) {
		s := pushed(t, open)
		run(t, s, "echo dirty > dirty")
		if err := s.PushTar(ctx(t), bytes.NewReader(makeTar(t))); err != nil {
			t.Fatal(err)
		}
		wantOut(t, s, "ls -A | wc -l", "0\n")
		checkEmpty(t, getDiff(t, s, false))
	}},
	{"pushtar_empty_stream_empties_workspace", func(t *testing.T, open opener) {
		s := pushed(t, open)
		if err := s.PushTar(ctx(t), bytes.NewReader(nil)); err != nil {
			t.Fatal(err)
		}
		wantOut(t, s, "ls -A | wc -l", "0\n")
		checkEmpty(t, getDiff(t, s, false))
	}},
	// A tree with an entry that would land outside the workspace, or pass
	// through a symlink, or that is not a file, directory or symlink, is
	// refused with an error. The workspace is then cleanly empty: no files, an
	// empty baseline, a working session; and nothing was written outside.
	{"pushtar_refuses_unsafe_trees", func(t *testing.T, open opener) {
		for _, c := range []struct {
			name    string
			entries func(out string) []tarEntry
		}{
			{"dotdot", func(string) []tarEntry {
				return []tarEntry{{name: "ok.txt", data: "ok"}, {name: "../escape", data: "x"}}
			}},
			{"dotdot_inside", func(string) []tarEntry {
				return []tarEntry{{name: "ok.txt", data: "ok"}, {name: "a/../../escape", data: "x"}}
			}},
			{"absolute", func(string) []tarEntry {
				return []tarEntry{{name: "ok.txt", data: "ok"}, {name: "/dryexec-conformance-abs-escape", data: "x"}}
			}},
			{"absolute_nested", func(string) []tarEntry {
				return []tarEntry{{name: "ok.txt", data: "ok"}, {name: "tmp/", typ: tar.TypeDir, mode: 0o755}, {name: "/tmp/dryexec-conformance-abs-escape", data: "x"}}
			}},
			{"symlink_then_file_through_it", func(out string) []tarEntry {
				return []tarEntry{{name: "ok.txt", data: "ok"}, {name: "l", typ: tar.TypeSymlink, link: out}, {name: "l/escape", data: "x"}}
			}},
			{"relative_symlink_then_file_through_it", func(string) []tarEntry {
				return []tarEntry{{name: "ok.txt", data: "ok"}, {name: "l", typ: tar.TypeSymlink, link: ".."}, {name: "l/escape", data: "x"}}
			}},
			{"symlink_then_file_over_it", func(out string) []tarEntry {
				return []tarEntry{{name: "ok.txt", data: "ok"}, {name: "l", typ: tar.TypeSymlink, link: filepath.Join(out, "escape")}, {name: "l", data: "x"}}
			}},
			{"hardlink", func(string) []tarEntry {
				return []tarEntry{{name: "ok.txt", data: "ok"}, {name: "hl", typ: tar.TypeLink, link: "/etc/passwd"}}
			}},
			{"char_device", func(string) []tarEntry {
				return []tarEntry{{name: "ok.txt", data: "ok"}, {name: "null", typ: tar.TypeChar}}
			}},
		} {
			t.Run(c.name, func(t *testing.T) {
				out := t.TempDir()
				os.Chmod(out, 0o777)
				s := pushed(t, open)
				run(t, s, "echo dirty > dirty; cd sub")
				ws := s.Info().Workspace
				err := s.PushTar(ctx(t), bytes.NewReader(makeTar(t, c.entries(out)...)))
				// Nothing was written outside the workspace, as the sandbox
				// sees it or on the host.
				r := sh(t, s, `ls -A "$HOME/.." | grep -x -e escape -e ok.txt -e dryexec-conformance-abs-escape; ls -A /tmp/dryexec-conformance-abs-escape 2>/dev/null; ls -A `+quote(out)+`; true`)
				if r.Stdout != "" {
					t.Errorf("written outside the workspace (as the sandbox sees it): %q", r.Stdout)
				}
				for _, p := range []string{filepath.Join(out, "escape"), filepath.Join(filepath.Dir(ws), "escape"), "/tmp/dryexec-conformance-abs-escape", "/dryexec-conformance-abs-escape"} {
					if _, err := os.Lstat(p); err == nil {
						os.Remove(p)
						t.Errorf("written outside the workspace, on the host: %s", p)
					}
				}
				if err == nil {
					t.Fatalf("PushTar accepted the tree")
				}
				// Cleanly empty, and working.
				wantOut(t, s, `pwd; ls -A "$HOME" | wc -l`, ws+"\n0\n")
				checkEmpty(t, getDiff(t, s, false))
				seed(t, s, tree{"after": file("a")})
				wantOut(t, s, "ls -A", "after\n")
			})
		}
	}},
}
