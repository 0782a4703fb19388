package viewtrial

import (
	"errors"
	"fmt"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/wire"
)

// makeNodes makes in the upper dirs the FIFOs the sandbox's kernel kept in
// its own memory (wire.TrialDone.Nodes: gVisor's gofer makes regular files
// only), as that kernel showed them at the command's end — mode, owner,
// times — with any ancestor an upper dir lacks made as the sandbox showed
// it, so that the walk finds each where an ns trial's would be. The
// sandbox is gone: nothing else writes in the upper dirs. It returns why
// any could not be made (the delta is then incomplete), and the guest's
// own NodesLost. The list is the sandbox's word (on vm, a guest that root
// in the VM replaced may name any): what it has the host make counts
// against the FIFOs it asked for with trial.node, maxViewNodes in all.
func (t *Trial) makeNodes() []string {
	dn := t.Done
	if dn == nil {
		return nil
	}
	var why []string
	for i, l := range dn.NodesLost {
		if i == maxNodesLost {
			why = append(why, fmt.Sprintf("and %d more such FIFOs", len(dn.NodesLost)-i))
			break
		}
		why = append(why, "the sandbox kept a FIFO in its own memory that the delta lacks: "+clipGuest(l))
	}
	for i, n := range dn.Nodes {
		if t.nodesMade >= maxViewNodes {
			why = append(why, fmt.Sprintf("%d FIFOs the command made are not in the delta: the host makes at most %d per trial", len(dn.Nodes)-i, maxViewNodes))
			break
		}
		if err := t.makeNode(&n); err != nil {
			why = append(why, fmt.Sprintf("the FIFO the command made at %q is not in the delta: %v", n.Path, err))
		}
	}
	return why
}

// maxNodesLost bounds the guest's NodesLost lines in a delta's reason.
const maxNodesLost = 8

var errNotPlaced = errors.New("outside every upper dir, or not a FIFO with directories above it")

func (t *Trial) makeNode(n *wire.SandboxNode) error {
	p := string(n.Path)
	if !path.IsAbs(p) || path.Clean(p) != p || p == "/" || n.Mode&unix.S_IFMT != unix.S_IFIFO {
		return errNotPlaced
	}
	// Beneath a mask or dryexec's own state, what the command writes is
	// the mask's, never the delta's (as on ns): nothing to make.
	for _, h := range append(slices.Clone(t.Cover.Masks), t.Cover.Hidden...) {
		if h = strings.TrimSuffix(h, "/"); h != "" && (p == h || strings.HasPrefix(p, h+"/")) {
			return nil
		}
	}
	// The upper dir that stands for the deepest mount holding p.
	best := -1
	for i, u := range t.Uppers {
		if (u.Path == "/" || p == u.Path || strings.HasPrefix(p, u.Path+"/")) && p != u.Path &&
			(best < 0 || len(u.Path) > len(t.Uppers[best].Path)) {
			best = i
		}
	}
	names := strings.Split(strings.Trim(p, "/"), "/")
	if best < 0 || len(n.Dirs) != len(names)-1 {
		return errNotPlaced
	}
	skip := 0 // the components of the mount's own path
	if mp := t.Uppers[best].Path; mp != "/" {
		skip = len(strings.Split(strings.Trim(mp, "/"), "/"))
	}
	dir, err := unix.Open("/proc/self/fd/"+strconv.Itoa(t.ScratchFD)+"/u/"+strconv.Itoa(best), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer func() { unix.Close(dir) }()
	// Each directory below the mount, opened (or made) one name at a time
	// beneath the upper dir, never through a link the sandbox made. One
	// made here stands for a host directory the sandbox did not change (an
	// overlay's copy-up keeps its mtime): its mtime is the sandbox's again
	// once its entries are made, deepest first. The FIFO's own parent: below.
	var restore []dirTimes
	defer func() {
		for i := len(restore) - 1; i >= 0; i-- {
			r := restore[i]
			setTimes(r.parent, r.name, r.node)
			unix.Close(r.parent)
		}
	}()
	for i := skip; i < len(names)-1; i++ {
		d := &n.Dirs[i]
		next, err := openBeneath(dir, names[i])
		if errors.Is(err, unix.ENOENT) {
			if err := unix.Mkdirat(dir, names[i], 0o700); err != nil {
				return err
			}
			t.nodesMade++
			if err := setOwnerMode(dir, names[i], d); err != nil {
				return err
			}
			if i < len(names)-2 {
				parent, err := unix.FcntlInt(uintptr(dir), unix.F_DUPFD_CLOEXEC, 0)
				if err != nil {
					return err
				}
				restore = append(restore, dirTimes{parent, names[i], d})
			}
			next, err = openBeneath(dir, names[i])
		}
		if err != nil {
			return err
		}
		unix.Close(dir)
		dir = next
	}
	name := names[len(names)-1]
	var st unix.Stat_t
	switch err := unix.Fstatat(dir, name, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFIFO:
		return nil // a FIFO the host had, moved there: the walk has it
	case err == nil && st.Mode&unix.S_IFMT == unix.S_IFCHR && st.Rdev == 0:
		// A whiteout: the host's file was removed before the FIFO came.
		if err := unix.Unlinkat(dir, name, 0); err != nil {
			return err
		}
	case err == nil:
		return fmt.Errorf("the upper dir has a %o there", st.Mode&unix.S_IFMT)
	case !errors.Is(err, unix.ENOENT):
		return err
	}
	if err := unix.Mknodat(dir, name, unix.S_IFIFO|0o600, 0); err != nil {
		return err
	}
	t.nodesMade++
	if err := setOwnerMode(dir, name, n); err != nil {
		return err
	}
	if err := setTimes(dir, name, n); err != nil {
		return err
	}
	// The parent's mtime: gVisor did not move it for a FIFO of its own,
	// where Linux does. If something changed the parent after the FIFO
	// (its ctime is later: tar and rsync set a directory's times after its
	// entries; a later entry moved it), the sandbox's mtime is what the
	// command left: set it again. Otherwise the mtime mknod just gave it
	// stands, as the FIFO's making moved it natively.
	if len(n.Dirs) == 0 || n.Dirs[len(n.Dirs)-1].CtimeNS < n.CtimeNS {
		return nil
	}
	pd := &n.Dirs[len(n.Dirs)-1]
	ts := []unix.Timespec{unix.NsecToTimespec(pd.AtimeNS), unix.NsecToTimespec(pd.MtimeNS)}
	// dir is an O_PATH descriptor: through its /proc link (followed).
	return unix.UtimesNanoAt(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(dir), ts, 0)
}

// openBeneath opens name in dir, a directory and not a link.
func openBeneath(dir int, name string) (int, error) {
	return unix.Openat2(dir, name, &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_NOFOLLOW | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS | unix.RESOLVE_NO_XDEV})
}

// dirTimes is a directory whose times are to be set again: name in parent
// (a descriptor of its own).
type dirTimes struct {
	parent int
	name   string
	node   *wire.SandboxNode
}

// setOwnerMode gives the entry name in dir (one this function's caller just
// made: no link) n's owner and permission bits.
func setOwnerMode(dir int, name string, n *wire.SandboxNode) error {
	if err := unix.Fchownat(dir, name, int(n.UID), int(n.GID), unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	return unix.Fchmodat(dir, name, n.Mode&0o7777, 0)
}

func setTimes(dir int, name string, n *wire.SandboxNode) error {
	ts := []unix.Timespec{unix.NsecToTimespec(n.AtimeNS), unix.NsecToTimespec(n.MtimeNS)}
	return unix.UtimesNanoAt(dir, name, ts, unix.AT_SYMLINK_NOFOLLOW)
}

// OpenViewRoot takes the host's handle on the merged view the view guest
// exports (ViewRoot): "root" in its scratch dir, which is the working
// directory of what it became (QEMU), in its mount namespace. Called once
// the view guest has exec'ed; the working directory is checked to be the
// scratch tmpfs the host holds, so that a pid reused meanwhile gives nothing.
func (t *Trial) OpenViewRoot() error {
	cwd, err := unix.Open("/proc/"+strconv.Itoa(t.Cmd.Process.Pid)+"/cwd", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening the view guest's working directory: %w", err)
	}
	defer unix.Close(cwd)
	var a, b unix.Stat_t
	if err := unix.Fstat(cwd, &a); err != nil {
		return err
	}
	if err := unix.Fstat(t.ScratchFD, &b); err != nil {
		return err
	}
	if a.Dev != b.Dev || a.Ino != b.Ino {
		return fmt.Errorf("%w: the view guest's working directory is not its scratch tmpfs", dryexec.ErrGuest)
	}
	root, err := unix.Openat(cwd, "root", unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening the merged view: %w", err)
	}
	t.ViewRoot = os.NewFile(uintptr(root), "view")
	return nil
}

// NodeInView makes the FIFO req asks for (or chmods it, or sets an entry's
// times) through the merged view whose root is root, as the sandbox's own
// call would have, and returns the errno the call gets. The request comes
// from the sandbox and is trusted in nothing: its directory is resolved
// beneath root, every link in it followed as within root (RESOLVE_IN_ROOT:
// an absolute link or a ".." stays in the view, never reaching the host's
// own directories), no magic link; the name is one component, never
// followed; only a FIFO is made or chmodded. Through the merged view, overlayfs copies the directory
// up as for any write of the sandbox.
func NodeInView(root int, req *wire.TrialNode) unix.Errno {
	name := string(req.Name)
	if name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\x00") ||
		!path.IsAbs(string(req.Dir)) || strings.ContainsRune(string(req.Dir), 0) ||
		req.Op == wire.NodeMknod && req.Mode&unix.S_IFMT != unix.S_IFIFO ||
		req.Op != wire.NodeMknod && req.Op != wire.NodeChmod && req.Op != wire.NodeUtimes {
		return unix.EINVAL
	}
	dir, err := unix.Openat2(root, string(req.Dir), &unix.OpenHow{Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
		Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
	if err != nil {
		return errnoOf(err)
	}
	defer unix.Close(dir)
	if req.Op == wire.NodeUtimes {
		// Any kind of entry: the entry itself (a link's own times, as
		// lutimes), never what it points to. The kernel checks the times.
		ts := []unix.Timespec{{Sec: req.Times[0], Nsec: req.Times[1]}, {Sec: req.Times[2], Nsec: req.Times[3]}}
		if err := unix.UtimesNanoAt(dir, name, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return errnoOf(err)
		}
		return 0
	}
	undo := func(err error) unix.Errno { return errnoOf(err) }
	if req.Op == wire.NodeMknod {
		// This process's umask would apply: the bits are set below, on
		// the node itself.
		if err := unix.Mknodat(dir, name, unix.S_IFIFO|0o600, 0); err != nil {
			return errnoOf(err)
		}
		undo = func(err error) unix.Errno {
			unix.Unlinkat(dir, name, 0)
			return errnoOf(err)
		}
	}
	// The node itself, not a link (chmod would follow it on the host).
	fd, err := unix.Openat(dir, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return errnoOf(err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return errnoOf(err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFIFO {
		return unix.EPERM // not the FIFO the sandbox saw (it changed meanwhile)
	}
	if req.Op == wire.NodeMknod {
		if err := unix.Fchownat(fd, "", int(req.UID), int(req.GID), unix.AT_EMPTY_PATH); err != nil {
			return undo(err)
		}
	}
	// An O_PATH descriptor takes no fchmod: through its /proc link.
	if err := unix.Fchmodat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(fd), req.Mode&0o7777, 0); err != nil {
		return undo(err)
	}
	return 0
}

func errnoOf(err error) unix.Errno {
	var en unix.Errno
	if errors.As(err, &en) {
		return en
	}
	return unix.EIO
}
