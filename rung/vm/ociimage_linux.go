package vm

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/image"
	"github.com/dryexec/dryexec/rung/linuxns"
	"github.com/dryexec/dryexec/wire"
)

// SupportsImages implements dryexec.ImageRung: a trial on an image boots
// with the image packed as erofs (image.ErofsOf, cached by digest) on a
// read-only virtio-blk drive, and the VM's root is an overlay of the VM's
// own over it, its upper dir on a tmpfs of the VM's (guest/vmimage_linux.go):
// the image's files are read by the VM's kernel from the drive, never
// served by QEMU's 9p per access. After the command the guest writes the
// upper dir as a tar on a second drive (overlay's own marks, not a layer's
// .wh. names: wire.VMImageSerial); the host,
// once QEMU has ended, reads that drive as plain bytes and unpacks it with
// a pulled layer's checks (image.UnpackUpper) into the trial's upper dir on
// the host, which it walks against the image as on ns (docs/images.md).
// The host's kernel never mounts anything the VM wrote.
func (r *Rung) SupportsImages() bool { return true }

// imageSandbox is sandboxFor for a trial on spec.Image: one mount, "/",
// whose lowers are the image's layers; no masks (nothing of the host's
// filesystem is in the view, as on ns); the network as asked.
func imageSandbox(spec dryexec.TrialSpec) (sandbox, error) {
	if err := dryexec.CheckImage(&Rung{}, spec.Image); err != nil {
		return sandbox{}, err
	}
	if spec.Image.UserXattr {
		// The vm rung runs as root: a rootless cache's opaque dirs
		// (user.overlay.*) would not be honoured by root's overlay.
		return sandbox{}, unavailable("an image from the cache of a user that is not root (the vm rung runs as root, with root's image cache)")
	}
	caDir, err := linuxns.EnsureCA(spec.NetCADir)
	if err != nil {
		return sandbox{}, err
	}
	nets := spec.Net
	if len(nets) == 0 {
		nets = []string{"none"}
	}
	return sandbox{mounts: []wire.MountSpec{{Path: "/"}}, image: spec.Image.Layers, caDir: caDir, net: nets,
		limits: spec.Limits, upperSize: spec.UpperSizeBytes}, nil
}

// openImage takes the host's read-only view of the trial's image, which the
// walk compares the upper dir with, checks the cwd in it, and has the
// image's erofs drive (built on first use) and, for a trial, the drive the
// VM sends its upper dir back on.
func (t *trial) openImage(ctx context.Context) error {
	if t.sb.image == nil {
		return nil
	}
	v, err := linuxns.ImageView(Name, t.sb.image)
	if err != nil {
		return err
	}
	t.imageView = v
	if !t.session {
		if err := linuxns.CheckImageCwd(v, t.Spec.Action.Cwd); err != nil {
			return err
		}
	}
	if t.r.imageOver9p && !t.session {
		return nil
	}
	if t.erofs, _, err = image.ErofsOf(ctx, t.Spec.Image.Digest, t.sb.image, v); err != nil {
		if errors.Is(err, image.ErrNoMkfsErofs) {
			return unavailable(err.Error())
		}
		return err
	}
	if t.session {
		return nil
	}
	// The VM's upper dir is on an ext4 drive with as many inodes as ns's
	// upper tmpfs on the host has (newWorkDrive).
	inodes := tmpfsInodes()
	// Sparse: it takes on the host what the VM writes, at most the upper
	// dir's budget and the tar's headers on top: up to 2 KiB an entry (a
	// header, PAX times, a path of up to 1 KiB) for as many entries as the
	// work drive has inodes (an empty file's entry is 1.5 KiB).
	size := wire.VMUpperOffset + t.Spec.UpperSizeBytes + t.Spec.UpperSizeBytes/4 + inodes*2048 + 64<<20
	if t.upperDrive, err = newUpperDrive(size, t.r.Log); err != nil {
		return err
	}
	t.workDrive, err = newWorkDrive(ctx, filepath.Dir(t.upperDrive.Name()), t.Spec.UpperSizeBytes, inodes)
	return err
}

// errNoMkfsExt4: the host has no mkfs.ext4 to make a VM's work drive with.
var errNoMkfsExt4 = errors.New("vm: mkfs.ext4 not found (install e2fsprogs)")

// tmpfsInodes is the inode count of a tmpfs mounted without nr_inodes on
// this host (half its pages), which ns's upper tmpfs has.
func tmpfsInodes() int64 {
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) != nil {
		return 1 << 20
	}
	return int64(si.Totalram) * int64(si.Unit) / int64(os.Getpagesize()) / 2
}

// newWorkDrive makes, in dir, the sparse file a trial's VM keeps its
// overlay upper and work dirs on (wire.VMWorkSerial): an ext4 of inodes
// inodes, made by mkfs.ext4 on the file and never mounted on the host.
// On a disk, not in the VM's RAM, so that a trial may write more than its
// VM's memory, up to upper (--upper-size), as on ns. The file is larger
// than upper (ext4 has at most one inode a block, and its inode tables):
// the guest takes the blocks past upper with a file of its own, outside
// the upper dir, so that the command gets ENOSPC where ns's would. No
// journal: the drive is gone with the trial, a crash loses nothing.
func newWorkDrive(ctx context.Context, dir string, upper, inodes int64) (string, error) {
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		return "", unavailable(fmt.Sprintf("%v: %v", errNoMkfsExt4, err))
	}
	const block = 4096
	size := max(upper+upper/16+inodes*256+64<<20, inodes*block)
	size = (size + block - 1) / block * block
	p := filepath.Join(dir, "work")
	f, err := os.OpenFile(p, os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return "", fmt.Errorf("the VM's work drive: %w", err)
	}
	err = f.Truncate(size)
	f.Close()
	if err != nil {
		return "", fmt.Errorf("the VM's work drive: %w", err)
	}
	// lazy_itable_init: the inode tables stay holes (the guest mounts
	// with noinit_itable, so its kernel does not zero them either).
	out, err := exec.CommandContext(ctx, mkfs, "-q", "-F", "-b", strconv.Itoa(block), "-I", "256", "-m", "0",
		"-N", strconv.FormatInt(inodes, 10), "-O", "^has_journal,^resize_inode",
		"-E", "lazy_itable_init=1,nodiscard,root_owner=0:0", p).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("the VM's work drive: mkfs.ext4: %w: %s", err, strings.TrimSpace(string(out)))
	}
	return p, nil
}

// upperDrivePattern names the private temp dirs of the VMs' upper drives.
const upperDrivePattern = "vm-upper-"

// newUpperDrive makes the sparse file a VM on an image writes its upper
// dir back on, in a dryexec.PrivateTemp dir of its own: what the command
// wrote is in it, and the host's /tmp is in every other sandbox's view.
// First what processes that are gone left there (a crash mid-trial) is
// removed: dryexec.SweepPrivateTemp, the daemon's and gc's sweep too.
func newUpperDrive(size int64, log *slog.Logger) (*os.File, error) {
	if _, err := dryexec.SweepPrivateTemp(os.Getenv); err != nil && log != nil {
		log.Warn("removing what crashed processes left in the private temp dir", "err", err)
	}
	dir, err := dryexec.PrivateTemp(os.Getenv, upperDrivePattern)
	if err != nil {
		return nil, fmt.Errorf("the VM's upper drive: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, "upper"), os.O_RDWR|os.O_CREATE|os.O_EXCL|unix.O_CLOEXEC, 0o600)
	if err == nil {
		if err = f.Truncate(size); err != nil {
			f.Close()
		}
	}
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("the VM's upper drive: %w", err)
	}
	return f, nil
}

// imageDrives adds the image's drives to cfg, and drops the 9p view: the
// VM's root is its own overlay over the erofs drive.
func (t *trial) imageDrives(cfg *vmConfig) {
	if t.erofs == "" {
		return
	}
	cfg.rootDir = ""
	cfg.drives = append(cfg.drives, drive{path: t.erofs, serial: wire.VMImageSerial, readOnly: true})
	if t.upperDrive != nil {
		cfg.drives = append(cfg.drives, drive{path: t.upperDrive.Name(), serial: wire.VMUpperSerial})
	}
	if t.workDrive != "" {
		cfg.drives = append(cfg.drives, drive{path: t.workDrive, serial: wire.VMWorkSerial})
	}
}

// hostUpperSize is the size of the host's scratch tmpfs, which holds the
// trial's upper dir: --upper-size, as on ns. On an image with a work drive,
// the VM enforces the budget (its ext4 holds --upper-size of data) and
// reports it used up; the host's tmpfs holds what it sends back and the
// view's own entries beside it, so it gets room for those on top, lest a
// budget the VM filled fail the import.
func (t *trial) hostUpperSize() int64 {
	if t.workDrive == "" {
		return t.Spec.UpperSizeBytes
	}
	return t.Spec.UpperSizeBytes + hostScratchSlack
}

// hostScratchSlack: the view's own entries in the host's scratch tmpfs.
const hostScratchSlack = 16 << 20

// innerStart gives the guest in the VM on an image the size of its upper
// tmpfs (the trial's --upper-size, as the host's upper tmpfs has it on ns)
// and netsim's files, which it binds over its own root (the view guest's
// binds are in the 9p view, which a VM on an image does not mount).
func (t *trial) innerStart(start *wire.TrialStart) {
	if t.erofs == "" {
		return
	}
	start.UpperSize = t.Spec.UpperSizeBytes
	if t.net.File() != nil {
		start.Net, start.NetFilesOnly = true, true
		start.TrustBundle, start.TrustPath = t.net.trustBundle, t.net.trustPath
	}
}

// errNoUpper: the VM did not write its upper dir back whole (it died, or
// its guest failed to: the console says why).
var errNoUpper = errors.New("the VM did not send its upper dir back")

func (t *trial) consoleText() string {
	if t.console == nil {
		return ""
	}
	return tailString(t.console)
}

// importUpper unpacks the upper dir the VM wrote on its upper drive into
// the trial's upper dir on the host, once QEMU has ended: the drive is
// read as plain bytes, its tar checked entry by entry as a pulled layer's
// (no path above the upper dir, no device node, no trusted.* xattr).
func (t *trial) importUpper(ctx context.Context) error {
	if t.upperDrive == nil {
		return nil
	}
	head := make([]byte, len(wire.VMUpperMagic)+8)
	if _, err := t.upperDrive.ReadAt(head, 0); err != nil {
		return fmt.Errorf("%w: %w", errNoUpper, err)
	}
	if string(head[:len(wire.VMUpperMagic)]) != wire.VMUpperMagic {
		// The guest's own word on why, if it said it.
		con := t.consoleText()
		if i := strings.LastIndex(con, wire.VMExportFailed); i >= 0 {
			msg, _, _ := strings.Cut(con[i:], "\n")
			return fmt.Errorf("%w (%s)", errNoUpper, strings.TrimSpace(msg))
		}
		return errNoUpper
	}
	st, err := t.upperDrive.Stat()
	if err != nil {
		return err
	}
	n := binary.LittleEndian.Uint64(head[len(wire.VMUpperMagic):])
	if n > uint64(st.Size()-wire.VMUpperOffset) {
		return fmt.Errorf("%w: its length (%d) is past the drive's end", errNoUpper, n)
	}
	dir := "/proc/self/fd/" + strconv.Itoa(t.ScratchFD) + "/u/0"
	skipped, err := image.UnpackUpper(ctx, io.NewSectionReader(t.upperDrive, wire.VMUpperOffset, int64(n)), dir, t.r.Log)
	if err != nil {
		return fmt.Errorf("the VM's upper dir: %w", err)
	}
	if skipped > 0 && t.r.Log != nil {
		t.r.Log.Debug("device nodes of the VM's upper dir left out", "trial", t.Spec.TrialID, "n", skipped)
	}
	return nil
}

// drive is a virtio-blk drive of a VM, found in it by its serial.
type drive struct {
	path     string
	serial   string
	readOnly bool
}

func (d drive) args(i int) []string {
	id := "drv" + strconv.Itoa(i)
	// QEMU's option syntax doubles a comma inside a value.
	spec := "file=" + strings.ReplaceAll(d.path, ",", ",,") + ",format=raw,if=none,id=" + id
	if d.readOnly {
		spec += ",readonly=on"
	}
	return []string{"-drive", spec, "-device", "virtio-blk-device,drive=" + id + ",serial=" + d.serial}
}

// diffAgainstImage has the walk compare the upper dir with the image, not
// with the host's "/".
func (t *trial) diffAgainstImage() {
	if t.imageView == nil {
		return
	}
	for i := range t.Uppers {
		t.Uppers[i].Root = t.imageView
	}
}

// imageDelta says, in the delta, which image the trial ran on.
func imageDelta(spec dryexec.TrialSpec, d *dryexec.StateDelta) {
	if d != nil && spec.Image != nil {
		d.Image = &dryexec.DeltaImage{Ref: spec.Image.Ref, Digest: spec.Image.Digest, Workspace: spec.Action.Cwd}
	}
}

func (t *trial) closeImage() {
	if t.imageView != nil {
		t.imageView.Close()
	}
	if t.upperDrive != nil {
		os.RemoveAll(filepath.Dir(t.upperDrive.Name()))
		t.upperDrive.Close()
	}
}

// SupportsImages implements dryexec.ImageRung: an image trial runs cold
// (Rung.Trial).
func (p *Pool) SupportsImages() bool { return true }

// checkAction checks spec's action: its cwd on the host, or, on an image,
// in the image (openImage does, once the image's view is open).
func checkAction(spec dryexec.TrialSpec) error {
	if spec.Image != nil {
		return linuxns.CheckImageAction(spec.Action)
	}
	return linuxns.CheckAction(spec.Action)
}
