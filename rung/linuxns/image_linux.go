package linuxns

import (
	"fmt"
	"os"
	"os/exec"
	"path"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/guestexe"
	"github.com/dryexec/dryexec/internal/imagemount"
	"github.com/dryexec/dryexec/internal/tail"
	"github.com/dryexec/dryexec/wire"
)

// SupportsImages implements dryexec.ImageRung: a trial or session on an
// image mounts the image's layers as the lowers of the view's root overlay
// (docs/images.md).
func (r *Rung) SupportsImages() bool { return true }

// SupportsImages implements dryexec.ImageRung: an image trial runs cold
// (its sandbox is never the pool's template).
func (p *Pool) SupportsImages() bool { return true }

// checkImage refuses what an image view cannot do here.
func checkImage(img *dryexec.ImageRoot) error {
	if err := dryexec.CheckImage(&Rung{}, img); err != nil {
		return err
	}
	// Root's layers mark opaque dirs with trusted.overlay.*, which only an
	// overlay mounted by root honours; a rootless cache's with
	// user.overlay.*, which only a userxattr overlay reads (and a rootless
	// guest cannot mount without userxattr). Mounted the other way, the
	// image's deleted directory contents would show again.
	if rootless := os.Getuid() != 0; rootless != img.UserXattr {
		return &dryexec.IsolationUnavailableError{Rung: Name, Missing: fmt.Sprintf(
			"an image from a cache of %s's (userxattr form: %v) cannot serve a sandbox of %s: each keeps its own image cache",
			map[bool]string{true: "a user that is not root", false: "root"}[img.UserXattr], img.UserXattr,
			map[bool]string{true: "a user that is not root", false: "root"}[rootless])}
	}
	return nil
}

// imageSandbox is the sandbox of a trial on an image: one overlay at "/"
// over the image's layers, no masks (nothing of the host is in the view,
// its secrets and dryexec's own state included), the network as asked.
func imageSandbox(spec dryexec.TrialSpec) (sandbox, error) {
	if err := checkImage(spec.Image); err != nil {
		return sandbox{}, err
	}
	caDir, err := EnsureCA(spec.NetCADir)
	if err != nil {
		return sandbox{}, err
	}
	nets := spec.Net
	if len(nets) == 0 {
		nets = []string{"none"}
	}
	return sandbox{Mounts: []wire.MountSpec{{Path: "/"}}, Image: spec.Image.Layers, Limits: spec.Limits,
		UpperSize: spec.UpperSizeBytes, Net: nets, NetCADir: caDir}, nil
}

// imageView mounts the host's read-only merged view of the layers
// (detached: nothing appears in the host's mount table, and it is gone with
// the file).
func imageView(layers []string) (*os.File, error) { return ImageView(Name, layers) }

// checkImageCwd checks that an image trial's cwd is a directory of the
// image (for a view of the host, checkAction looked at the host's).
func (t *trial) checkImageCwd(cwd string) error {
	if t.imageView == nil {
		return nil
	}
	return CheckImageCwd(t.imageView, cwd)
}

// What the gvisor rung shares with ns for a sandbox on an image: the same
// checks and the same host's view of the image, so that both rungs refuse
// alike and diff against the same tree.

// CheckImageAction is CheckAction for a trial on an image: its cwd is a path
// in the image (CheckImageCwd), not on the host.
func CheckImageAction(a dryexec.Action) error { return checkAction(a, true) }

// ImageView is the host's read-only merged view of an image's layers, which
// a trial's upper dir is diffed against (fsdelta.Mount.Root); rung names the
// rung in its error. A host that is not root cannot mount an overlay: a
// helper in a user namespace of its own mounts the view (in the rootless
// userxattr form) and hands it over (userNSView).
func ImageView(rung string, layers []string) (*os.File, error) {
	var fd int
	var err error
	if os.Geteuid() == 0 {
		fd, err = imagemount.Overlay(layers, "", "", false)
	} else {
		fd, err = userNSView(layers)
	}
	if err != nil {
		return nil, &dryexec.IsolationUnavailableError{Rung: rung, Missing: err.Error()}
	}
	return os.NewFile(uintptr(fd), "image"), nil
}

// userNSView runs wire.RoleImageView in a user and mount namespace of its
// own (uid and gid 0 there are the caller's: the cache's files are the
// caller's) and returns the view's mount descriptor it sends back. The mount
// is detached, so it lives on in the descriptor after the helper is gone.
func userNSView(layers []string) (int, error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("image view: socketpair: %w", err)
	}
	defer unix.Close(fds[0])
	child := os.NewFile(uintptr(fds[1]), "image-view")
	stderr := tail.New(4096)
	cmd := &exec.Cmd{
		Path:       guestexe.Executable(),
		Args:       append([]string{"dryexec", "guest", wire.RoleImageView}, layers...),
		Env:        []string{},
		ExtraFiles: []*os.File{child},
		Stderr:     stderr,
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER | syscall.CLONE_NEWNS,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}},
			Pdeathsig:   syscall.SIGKILL,
		},
	}
	err = cmd.Start()
	child.Close()
	if err != nil {
		return -1, fmt.Errorf("image view: cannot create a user namespace: %w", err)
	}
	// The helper's end closes when it exits: a read never outwaits it.
	buf, oob := make([]byte, 4096), make([]byte, unix.CmsgSpace(4))
	n, oobn, _, _, rerr := unix.Recvmsg(fds[0], buf, oob, unix.MSG_CMSG_CLOEXEC)
	werr := cmd.Wait()
	if rerr != nil {
		return -1, fmt.Errorf("image view: %w", rerr)
	}
	var fd = -1
	if msgs, err := unix.ParseSocketControlMessage(oob[:oobn]); err == nil && len(msgs) == 1 {
		if rights, err := unix.ParseUnixRights(&msgs[0]); err == nil && len(rights) == 1 {
			fd = rights[0]
		}
	}
	switch {
	case fd >= 0 && werr == nil:
		return fd, nil
	case fd >= 0:
		unix.Close(fd)
	case n > 0 && buf[0] != 0:
		return -1, fmt.Errorf("image view: %s", buf[:n])
	}
	msg, _ := stderr.Bytes()
	return -1, fmt.Errorf("image view: the helper failed: %v: %s", werr, msg)
}

// CheckImageCwd says whether cwd is a directory in the image view (resolved
// inside it: a symlink of the image cannot point it at the host's files).
func CheckImageCwd(view *os.File, cwd string) error {
	rel := path.Clean(cwd)[1:]
	if rel == "" {
		return nil
	}
	fd, err := unix.Openat2(int(view.Fd()), rel, &unix.OpenHow{
		Flags: unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC, Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS})
	if err != nil {
		return fmt.Errorf("%w: cwd %q is not a directory in the image", dryexec.ErrBadAction, cwd)
	}
	unix.Close(fd)
	return nil
}
