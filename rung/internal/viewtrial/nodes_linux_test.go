package viewtrial

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/wire"
)

// TestNodeInViewStaysInTheView asks NodeInView, as a sandbox that lies
// would, to make or chmod FIFOs outside the view: through an absolute link
// to a host directory, "..", a host path, a name with a slash, a link in
// place of the FIFO. Each stays in the view or is refused, and the host's
// directory and FIFO are untouched; a FIFO through a link that stays in the
// view is made where the sandbox saw it, with the mode and owner asked for.
func TestNodeInViewStaysInTheView(t *testing.T) {
	view, host := t.TempDir(), t.TempDir()
	hostFIFO := filepath.Join(host, "fifo")
	if err := unix.Mkfifo(hostFIFO, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"sub", "dir"} {
		if err := os.Mkdir(filepath.Join(view, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for link, to := range map[string]string{
		"tohost":      host,   // a link the command made to a host directory
		"inview":      "/sub", // absolute, meant within the view
		"dir/up":      "../../" + filepath.Base(host),
		"dir/hostfif": hostFIFO, // in place of a FIFO, for chmod
	} {
		if err := os.Symlink(to, filepath.Join(view, link)); err != nil {
			t.Fatal(err)
		}
	}
	root, err := unix.Open(view, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(root)
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	mk := func(dir, name string, mode uint32) *wire.TrialNode {
		return &wire.TrialNode{Op: wire.NodeMknod, Dir: []byte(dir), Name: []byte(name), Mode: unix.S_IFIFO | mode, UID: uid, GID: gid}
	}
	const sec, nsec = 1767225609, 710019831
	utimes := func(dir, name string) *wire.TrialNode {
		return &wire.TrialNode{Op: wire.NodeUtimes, Dir: []byte(dir), Name: []byte(name), Times: [4]int64{sec, nsec, sec, nsec}}
	}
	var before unix.Stat_t
	if err := unix.Lstat(hostFIFO, &before); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		req  *wire.TrialNode
		want unix.Errno
	}{
		{"through a link to a host dir", mk("/tohost", "p", 0o644), unix.ENOENT},
		{"dot-dot above the view", mk("/../../../../../../"+host, "p", 0o644), unix.ENOENT},
		{"a host path", mk(host, "p", 0o644), unix.ENOENT},
		{"a relative link climbing out", mk("/dir/up", "p", 0o644), unix.ENOENT},
		{"a name with a slash", mk("/", "tohost/p", 0o644), unix.EINVAL},
		{"a name that climbs", mk("/sub", "..", 0o644), unix.EINVAL},
		{"a relative dir", mk("sub", "p", 0o644), unix.EINVAL},
		{"a device node", &wire.TrialNode{Op: wire.NodeMknod, Dir: []byte("/sub"), Name: []byte("d"), Mode: unix.S_IFCHR | 0o644}, unix.EINVAL},
		{"chmod of a link to a host FIFO", &wire.TrialNode{Op: wire.NodeChmod, Dir: []byte("/dir"), Name: []byte("hostfif"), Mode: 0o666}, unix.EPERM},
		{"chmod through a link to a host dir", &wire.TrialNode{Op: wire.NodeChmod, Dir: []byte("/tohost"), Name: []byte("fifo"), Mode: 0o666}, unix.ENOENT},
		{"an unknown op", &wire.TrialNode{Op: "unlink", Dir: []byte("/sub"), Name: []byte("x")}, unix.EINVAL},
		{"utimes through a link to a host dir", utimes("/tohost", "fifo"), unix.ENOENT},
		{"utimes above the view", utimes("/../../../../../../"+host, "fifo"), unix.ENOENT},
		{"utimes of a name that climbs", utimes("/dir", ".."), unix.EINVAL},
		// The link's own times (as lutimes), never the host FIFO's.
		{"utimes of a link to a host FIFO", utimes("/dir", "hostfif"), 0},
	} {
		if got := NodeInView(root, c.req); got != c.want {
			t.Errorf("%s: got %v, want %v", c.name, got, c.want)
		}
	}
	ents, err := os.ReadDir(host)
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(hostFIFO, &st); err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || st.Mode != unix.S_IFIFO|0o600 || st.Mtim != before.Mtim {
		t.Errorf("the host dir changed: %d entries, its FIFO's mode %o, mtime %v (was %v)", len(ents), st.Mode, st.Mtim, before.Mtim)
	}
	if err := unix.Lstat(filepath.Join(view, "dir", "hostfif"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Mtim != (unix.Timespec{Sec: sec, Nsec: nsec}) {
		t.Errorf("the link's own mtime %v, want %d.%09d", st.Mtim, sec, nsec)
	}

	// Through a link that stays in the view: made where the sandbox saw
	// it, with exactly the mode asked for (this process's umask aside).
	old := unix.Umask(0o077)
	defer unix.Umask(old)
	if e := NodeInView(root, mk("/inview", "p", 0o664)); e != 0 {
		t.Fatalf("mknod through /inview: %v", e)
	}
	if e := NodeInView(root, mk("/inview", "p", 0o664)); e != unix.EEXIST {
		t.Errorf("a second mknod: %v, want EEXIST", e)
	}
	if err := unix.Lstat(filepath.Join(view, "sub", "p"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Mode != unix.S_IFIFO|0o664 || st.Uid != uid || st.Gid != gid {
		t.Errorf("made %o %d:%d, want %o %d:%d", st.Mode, st.Uid, st.Gid, unix.S_IFIFO|0o664, uid, gid)
	}
	if e := NodeInView(root, &wire.TrialNode{Op: wire.NodeChmod, Dir: []byte("/sub"), Name: []byte("p"), Mode: 0o640}); e != 0 {
		t.Fatalf("chmod: %v", e)
	}
	if unix.Lstat(filepath.Join(view, "sub", "p"), &st); st.Mode != unix.S_IFIFO|0o640 {
		t.Errorf("after chmod: %o", st.Mode)
	}
}

// A sandbox asking for FIFOs in a loop gets ENOSPC past maxViewNodes: each
// is an inode the host makes (charged to the host process, not to the
// sandbox's limits), so the count is the trial's, not the VM's to choose.
// Chmod and utimes make nothing and stay answered.
func TestNodeInViewBounded(t *testing.T) {
	view := t.TempDir()
	root, err := os.Open(view)
	if err != nil {
		t.Fatal(err)
	}
	tr := &Trial{ViewRoot: root}
	defer root.Close()
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	for i := range maxViewNodes {
		req := &wire.TrialNode{Op: wire.NodeMknod, Dir: []byte("/"), Name: []byte(strconv.Itoa(i)), Mode: unix.S_IFIFO | 0o600, UID: uid, GID: gid}
		if e := tr.nodeInView(req); e != 0 {
			t.Fatalf("FIFO %d: %v", i, e)
		}
	}
	if e := tr.nodeInView(&wire.TrialNode{Op: wire.NodeMknod, Dir: []byte("/"), Name: []byte("one-more"), Mode: unix.S_IFIFO | 0o600, UID: uid, GID: gid}); e != unix.ENOSPC {
		t.Errorf("FIFO %d: %v, want ENOSPC", maxViewNodes+1, e)
	}
	if _, err := os.Lstat(filepath.Join(view, "one-more")); err == nil {
		t.Error("a FIFO past the bound was made")
	}
	if e := tr.nodeInView(&wire.TrialNode{Op: wire.NodeChmod, Dir: []byte("/"), Name: []byte("0"), Mode: 0o640}); e != 0 {
		t.Errorf("chmod past the bound: %v", e)
	}
}

// A sandbox swapping a directory of its view with a link to a host
// directory (RENAME_EXCHANGE, in a loop) while it asks for FIFOs, chmods
// and times there: whichever the host meets, it stays in the view; the
// host directory gains nothing and its FIFO keeps its mode and times.
func TestNodeInViewSwapRace(t *testing.T) {
	view, host := t.TempDir(), t.TempDir()
	hostFIFO := filepath.Join(host, "f")
	if err := unix.Mkfifo(hostFIFO, 0o600); err != nil {
		t.Fatal(err)
	}
	var before unix.Stat_t
	if err := unix.Lstat(hostFIFO, &before); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(filepath.Join(view, "d"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mkfifo(filepath.Join(view, "d", "f"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(host, filepath.Join(view, "l")); err != nil {
		t.Fatal(err)
	}
	root, err := unix.Open(view, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(root)
	stop := testreq.SwapLoop(t, root, "d", "l")
	uid, gid := uint32(os.Getuid()), uint32(os.Getgid())
	const rounds = 2000
	for i := range rounds {
		name := "p" + strconv.Itoa(i)
		NodeInView(root, &wire.TrialNode{Op: wire.NodeMknod, Dir: []byte("/d"), Name: []byte(name), Mode: unix.S_IFIFO | 0o666, UID: uid, GID: gid})
		NodeInView(root, &wire.TrialNode{Op: wire.NodeChmod, Dir: []byte("/d"), Name: []byte("f"), Mode: 0o666})
		NodeInView(root, &wire.TrialNode{Op: wire.NodeUtimes, Dir: []byte("/d"), Name: []byte("f"), Times: [4]int64{1, 0, 1, 0}})
	}
	t.Logf("%d swaps during %d rounds", stop(), rounds)
	ents, err := os.ReadDir(host)
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(hostFIFO, &st); err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || st.Mode != before.Mode || st.Mtim != before.Mtim || st.Atim != before.Atim {
		t.Errorf("the host dir changed: %d entries, its FIFO's mode %o, mtime %v (was %o, %v)", len(ents), st.Mode, st.Mtim, before.Mode, before.Mtim)
	}
}
