package fsdelta

import (
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/fswalk"
	"github.com/dryexec/dryexec/wire"
)

// deepDepth is deeper than any path a path-based system call takes (PATH_MAX
// is 4096 bytes; each level adds 2).
const deepDepth = 5000

// mkChain makes dir name in root with a chain of depth dirs named "c" below it
// and a file f holding "deep\n" at the bottom, one name per system call (a path
// that deep is too long for any call). name "" starts the chain at root.
func mkChain(t testing.TB, root, name string, depth int) {
	t.Helper()
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(t, err)
	names := make([]string, 0, depth+1)
	if name != "" {
		names = append(names, name)
	}
	for range depth {
		names = append(names, "c")
	}
	for _, n := range names {
		if err := unix.Mkdirat(fd, n, 0o755); err != nil {
			unix.Close(fd)
			t.Fatalf("mkdirat: %v", err)
		}
		nfd, err := unix.Openat(fd, n, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		unix.Close(fd)
		must(t, err)
		fd = nfd
	}
	defer unix.Close(fd)
	ffd, err := unix.Openat(fd, "f", unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o644)
	must(t, err)
	_, err = unix.Write(ffd, []byte("deep\n"))
	unix.Close(ffd)
	must(t, err)
}

// chainPath is the path of level i (0: name itself) of a chain made by mkChain.
func chainPath(name string, i int) string {
	return name + strings.Repeat("/c", i)
}

// openFDs counts the process's open fds.
func openFDs(t testing.TB) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	must(t, err)
	return len(ents)
}

// A command may make (or delete) a tree deeper than PATH_MAX: the walk and the
// Differ reach every level one name at a time, holding a bounded number of
// fds, and report every path.
func TestDeepTree(t *testing.T) {
	rootOrSkip(t)
	type change struct {
		op dryexec.Op
		p  string
	}
	cases := []struct {
		name  string
		lower func(t *testing.T, lower string)
		do    func(t *testing.T, merged string)
		want  func() []change
	}{
		{
			name: "created",
			do:   func(t *testing.T, m string) { mkChain(t, m, "n", deepDepth) },
			want: func() []change {
				var w []change
				for i := 0; i <= deepDepth; i++ {
					w = append(w, change{dryexec.OpMkdir, chainPath("n", i)})
				}
				return append(w, change{dryexec.OpCreate, chainPath("n", deepDepth) + "/f"})
			},
		},
		{
			name:  "deleted at the bottom",
			lower: func(t *testing.T, l string) { mkChain(t, l, "h", deepDepth) },
			do: func(t *testing.T, m string) {
				// Whiteouts at the bottom of a chain of copied-up dirs.
				rmDeep(t, m, "h", deepDepth-1, "c")
			},
			want: func() []change {
				return []change{
					{dryexec.OpDelete, chainPath("h", deepDepth) + "/f"},
					{dryexec.OpRmdir, chainPath("h", deepDepth)},
				}
			},
		},
		{
			name:  "deleted whole",
			lower: func(t *testing.T, l string) { mkChain(t, l, "h", deepDepth) },
			do:    func(t *testing.T, m string) { rmDeep(t, m, "", 0, "h") },
			want: func() []change {
				w := []change{{dryexec.OpDelete, chainPath("h", deepDepth) + "/f"}}
				for i := deepDepth; i >= 0; i-- {
					w = append(w, change{dryexec.OpRmdir, chainPath("h", i)})
				}
				return w
			},
		},
		{
			name: "replacing a host dir",
			lower: func(t *testing.T, l string) {
				buildTree(t, l, []node{dir("r", 0o755), file("r/x", "x\n", 0o644)})
			},
			do: func(t *testing.T, m string) {
				rmDeep(t, m, "", 0, "r")
				mkChain(t, m, "r", deepDepth)
			},
			want: func() []change {
				var w []change
				for i := 1; i <= deepDepth; i++ {
					w = append(w, change{dryexec.OpMkdir, chainPath("r", i)})
				}
				return append(w, change{dryexec.OpCreate, chainPath("r", deepDepth) + "/f"}, change{dryexec.OpDelete, "r/x"})
			},
		},
	}
	// As the product mounts them: as root (redirect_dir=on) and rootless
	// (userxattr); the walk is the same code in the third mode.
	for _, mode := range overlayModes[1:] {
		for _, c := range cases {
			t.Run(mode.name+"/"+c.name, func(t *testing.T) {
				lower := tempDir(t)
				must(t, os.Chmod(lower, 0o755))
				if c.lower != nil {
					c.lower(t, lower)
				}
				o := mountOverlay(t, lower, mode.opts)
				c.do(t, o.merged)
				o.unmount()

				fds0, maxFDs := openFDs(t), 0
				d := NewDiffer([]Mount{{Path: lower}}, nil, diffMax)
				defer d.Close()
				var n int
				err := fswalk.Walk(o.upper, 0, fswalk.WalkOptions{UserXattr: mode.userXattr, Redirects: mode.redirects}, func(e *wire.FSEntry, content *os.File) error {
					if n++; n%500 == 0 {
						maxFDs = max(maxFDs, openFDs(t))
					}
					return d.Add(e, content)
				})
				if err != nil {
					t.Fatalf("walk+add: %v", err)
				}
				got, err := d.Finish()
				must(t, err)
				// The walk's and the Differ's fds are bounded (32 and 64 dirs),
				// whatever the depth.
				if maxFDs-fds0 > 100 {
					t.Errorf("%d fds open during the walk (%d before)", maxFDs, fds0)
				}
				want := c.want()
				if len(got) != len(want) {
					t.Fatalf("got %d changes, want %d", len(got), len(want))
				}
				for i, w := range want {
					g := got[i]
					if g.Op != w.op || g.Path != lower+"/"+w.p {
						t.Fatalf("change %d: got %s %.80s…(%d bytes), want %s …(%d bytes)", i, g.Op,
							strings.TrimPrefix(g.Path, lower+"/"), len(g.Path), w.op, len(lower)+1+len(w.p))
					}
					if g.Kind == dryexec.KindFile && g.Op == dryexec.OpCreate && g.SHA256 != sha("deep\n") {
						t.Errorf("%s: content %s", w.p[len(w.p)-20:], g.SHA256)
					}
					if g.Kind == dryexec.KindFile && g.Op == dryexec.OpDelete && strings.HasSuffix(w.p, "c/f") && g.BeforeSHA256 != sha("deep\n") {
						t.Errorf("delete of the deep file: before_sha256 %q", g.BeforeSHA256)
					}
				}
			})
		}
	}
}

// rmDeep removes name in the dir at depth levels of chain "c"s below
// root/chain (root itself when chain is ""), the way rm -rf does, at any depth.
func rmDeep(t testing.TB, root, chain string, depth int, name string) {
	t.Helper()
	dir := root
	if chain != "" {
		dir = root + "/" + chain
	}
	// GNU rm walks with fds (fts), whatever the depth; it is given one name
	// in a dir reached by chdir one level at a time.
	// A shell's cd makes a path of $PWD and the name, too long down there.
	script := `import os, subprocess, sys
os.chdir(sys.argv[1])
for _ in range(int(sys.argv[2])):
    os.chdir("c")
subprocess.run(["rm", "-rf", "--", sys.argv[3]], check=True)
`
	out, err := exec.Command("/usr/bin/python3", "-c", script, dir, strconv.Itoa(depth), name).CombinedOutput()
	if err != nil {
		t.Fatalf("rm -rf at depth %d: %v: %s", depth, err, out)
	}
}
