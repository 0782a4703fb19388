package guest

import (
	"archive/tar"
	"encoding/binary"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/wire"
)

// vmImageScratch is the VM's tmpfs for a root on an image: the erofs mount
// (lower), the layer of mount points beneath it (image-init), the overlay's
// upper and work dirs (u, w; a trial's in the work drive, mounted at disk)
// and netsim's files (net).
const vmImageScratch = "/vmimage"

// vmDrive returns the /dev path of the VM's virtio-blk disk whose serial
// is serial, or "": the host names its drives by serial (the order in which
// virtio-mmio devices are probed is not the command line's).
func vmDrive(serial string) string {
	ents, _ := filepath.Glob("/sys/block/vd*/serial")
	for _, e := range ents {
		if b, err := os.ReadFile(e); err == nil && strings.TrimSpace(string(b)) == serial {
			return "/dev/" + filepath.Base(filepath.Dir(e))
		}
	}
	return ""
}

// vmImage is a VM's root on an OCI image: the image's erofs (the host's
// read-only drive wire.VMImageSerial) under an overlay whose upper dir is
// on a tmpfs of the VM's, so that the image's files are read by the VM's
// own kernel from a block device, not served by QEMU's 9p per access, and
// the command's FIFOs and sub-second times are the VM kernel's own (no
// host round trip, as over 9p: vmfifo_linux.go). At the end the upper dir
// goes back to the host as a tar on the drive wire.VMUpperSerial (export),
// which the host unpacks, with a pulled layer's checks, into the trial's
// upper dir on the host and walks as on ns.
type vmImage struct {
	upper *os.File // the upper dir, reachable after the switch of root
	out   string   // the drive the upper dir is exported to ("": none)
}

// mountVMImage mounts the image's overlay at newRoot and binds netsim's
// files (cfg's, as the view guest does on the host) over it. nil, nil when
// the host attached no image drive: the root is then the 9p view.
func mountVMImage(newRoot string, cfg *wire.TrialStart, upperSize int64) (*vmImage, error) {
	dev := vmDrive(wire.VMImageSerial)
	if dev == "" {
		return nil, nil
	}
	// A trial's (a session's workspace is a tmpfs of its own, streamed).
	out := vmDrive(wire.VMUpperSerial)
	s := vmImageScratch
	if err := os.MkdirAll(s, 0o755); err != nil {
		return nil, err
	}
	// A trial's upper dir is on the host's ext4 drive (wire.VMWorkSerial),
	// not in the VM's RAM; without one (a session's upper dir, which it
	// never exports), on this tmpfs, as large as the trial's budget.
	work := vmDrive(wire.VMWorkSerial)
	opts := "mode=0755"
	if upperSize > 0 && work == "" {
		// The trial's --upper-size, as the host's upper tmpfs has it on ns.
		opts += ",size=" + strconv.FormatInt(upperSize, 10)
	}
	if err := unix.Mount("tmpfs", s, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		return nil, fmt.Errorf("the image's tmpfs: %w", err)
	}
	for _, d := range []string{"/lower", "/image-init", "/image-init/proc", "/image-init/dev", "/image-init/sys", "/disk"} {
		if err := os.Mkdir(s+d, 0o755); err != nil {
			return nil, err
		}
	}
	uw := s
	if work != "" {
		uw = s + "/disk"
		if err := mountWorkDrive(work, uw, upperSize); err != nil {
			return nil, err
		}
	}
	for _, d := range []string{"/u", "/w"} {
		if err := os.Mkdir(uw+d, 0o755); err != nil {
			return nil, err
		}
	}
	if err := unix.Mount(dev, s+"/lower", "erofs", unix.MS_RDONLY|unix.MS_NODEV, ""); err != nil {
		return nil, fmt.Errorf("mounting the image (erofs on %s): %w", dev, err)
	}
	// As the host's image view (guest/overlay_linux.go, imagemount): the
	// mount points the VM's own /proc, /dev and /sys need beneath the image,
	// metacopy and the index off. Unlike it, redirect_dir=nofollow: a
	// renamed directory's redirect xattr (trusted.*) does not survive the
	// trip back to the host as a layer, which would then hold only what was
	// copied up of it; renaming a directory of the image is EXDEV instead,
	// and mv copies. With classic mount options, not lowerdir+: the VM's
	// kernel may be older than 6.8, and these paths have no comma or colon.
	o := "lowerdir=" + s + "/lower:" + s + "/image-init,upperdir=" + uw + "/u,workdir=" + uw + "/w" +
		",metacopy=off,index=off,xino=auto,redirect_dir=nofollow"
	if err := unix.Mount("overlay", newRoot, "overlay", unix.MS_NODEV, o); err != nil {
		return nil, fmt.Errorf("the image's overlay: %w", err)
	}
	if err := bindNetFiles(cfg, s, newRoot); err != nil {
		return nil, err
	}
	u, err := os.OpenFile(uw+"/u", os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	return &vmImage{upper: u, out: out}, nil
}

// mountWorkDrive mounts the host's ext4 drive dev at dir and takes all but
// upperSize bytes of its free blocks with the file dir/reserve (fallocate:
// no data written), outside the upper dir: the command then gets ENOSPC
// where it would on ns's upper tmpfs of --upper-size (a directory or a
// large file's extent blocks count on ext4, not on tmpfs: a few KiB).
// noinit_itable: the inode tables the host left as holes stay holes.
func mountWorkDrive(dev, dir string, upperSize int64) error {
	if err := unix.Mount(dev, dir, "ext4", unix.MS_NOSUID|unix.MS_NODEV, "noinit_itable"); err != nil {
		return fmt.Errorf("mounting the work drive (ext4 on %s): %w", dev, err)
	}
	f, err := os.OpenFile(dir+"/reserve", os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	defer f.Close()
	// The reserve's own extent blocks come out of what is left: a second
	// round takes what the first overshot the budget by.
	for range 3 {
		var sfs unix.Statfs_t
		if err := unix.Fstatfs(int(f.Fd()), &sfs); err != nil {
			return err
		}
		extra := int64(sfs.Bavail)*sfs.Bsize - upperSize
		if extra < sfs.Bsize {
			return nil
		}
		st, err := f.Stat()
		if err != nil {
			return err
		}
		if err := unix.Fallocate(int(f.Fd()), 0, st.Size(), extra); err != nil {
			return fmt.Errorf("reserving the work drive's blocks past the budget: %w", err)
		}
	}
	return nil
}

// full says whether the upper dir's budget was used up: no block or no
// inode left, as ns's guest says of its upper tmpfs.
func (v *vmImage) full() bool {
	var sfs unix.Statfs_t
	return unix.Fstatfs(int(v.upper.Fd()), &sfs) == nil && (sfs.Bavail == 0 || sfs.Ffree == 0)
}

// export writes the upper dir to the upper drive as a tar with overlay's
// own marks (a whiteout as a char device 0/0, an opaque dir by the PAX
// record wire.VMUpperOpaque; not a layer's .wh. names, which a file the
// command named .wh.foo would fake): the tar at wire.VMUpperOffset, then the magic and the tar's length (8
// bytes, little-endian) at 0.
// Every process of the command is gone: the upper dir is final.
func (v *vmImage) export() error {
	if v.out == "" {
		return fmt.Errorf("no drive %s to export the upper dir to", wire.VMUpperSerial)
	}
	// O_DIRECT: the tar goes to the drive without the VM's page cache, whose
	// dirty pages (as slow to write back as TCG's disk is) next to a large
	// upper dir's inodes and dentries ran a small VM out of memory.
	f, err := os.OpenFile(v.out, os.O_WRONLY|unix.O_DIRECT, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	dw, err := newDirectWriter(f, wire.VMUpperOffset)
	if err != nil {
		return err
	}
	defer dw.free()
	cw := &countWriter{w: dw}
	tw := tar.NewWriter(cw)
	if err := writeUpperTar(tw, v.upper); err != nil {
		return err
	}
	if err := tw.Close(); err != nil {
		return err
	}
	if err := dw.flush(); err != nil {
		return err
	}
	if err := f.Sync(); err != nil {
		return err
	}
	// The magic and the length, alone in the drive's first block.
	dw.n = copy(dw.buf, wire.VMUpperMagic)
	binary.LittleEndian.PutUint64(dw.buf[dw.n:], uint64(cw.n))
	dw.n += 8
	dw.off = 0
	if err := dw.flush(); err != nil {
		return err
	}
	return f.Sync()
}

// directWriter writes to a file opened with O_DIRECT from off on, in
// whole blocks of a page-aligned buffer (O_DIRECT's rule); the last block
// is padded with zeros (the tar's length is written apart).
type directWriter struct {
	f   *os.File
	buf []byte
	n   int
	off int64
}

const directBlock = 4096

func newDirectWriter(f *os.File, off int64) (*directWriter, error) {
	buf, err := unix.Mmap(-1, 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, err
	}
	return &directWriter{f: f, buf: buf, off: off}, nil
}

func (d *directWriter) Write(b []byte) (int, error) {
	written := 0
	for len(b) > 0 {
		c := copy(d.buf[d.n:], b)
		d.n += c
		b = b[c:]
		written += c
		if d.n == len(d.buf) {
			if err := d.flush(); err != nil {
				return written, err
			}
		}
	}
	return written, nil
}

// flush writes what the buffer holds, padded to a whole block.
func (d *directWriter) flush() error {
	if d.n == 0 {
		return nil
	}
	n := (d.n + directBlock - 1) / directBlock * directBlock
	clear(d.buf[d.n:n])
	if _, err := d.f.WriteAt(d.buf[:n], d.off); err != nil {
		return err
	}
	d.off += int64(n)
	d.n = 0
	return nil
}

func (d *directWriter) free() { unix.Munmap(d.buf) }

type countWriter struct {
	w interface{ Write([]byte) (int, error) }
	n int64
}

func (c *countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	c.n += int64(n)
	return n, err
}

// writeUpperTar writes the overlay upper dir upper into tw, parents
// before children. trusted.overlay.* xattrs are overlay's bookkeeping: the
// opaque one becomes the PAX record wire.VMUpperOpaque, the others (origin, impure) are not the
// command's and are left out, as a redirect cannot happen (nofollow).
// user.* xattrs go as PAX records, as a layer's do.
func writeUpperTar(tw *tar.Writer, upper *os.File) error {
	// Through the descriptor: the upper dir is outside the root since the
	// switch. "/." so that the walk starts in the dir, not at the magic
	// link to it (a root that is a symlink is not descended).
	root := "/proc/self/fd/" + strconv.Itoa(int(upper.Fd())) + "/."
	links := map[uint64]string{} // inode -> the first name written
	// The walk names upper only by its descriptor's number: upper must stay
	// reachable until it ends, or the collector may finalize it mid-walk,
	// closing the descriptor (a walk of a few hundred entries allocates
	// enough), and every later path is ENOENT or another file's.
	defer runtime.KeepAlive(upper)
	return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		h := &tar.Header{Name: rel, Mode: int64(st.Mode & 0o7777), Uid: int(st.Uid), Gid: int(st.Gid),
			ModTime: time.Unix(st.Mtim.Unix()), AccessTime: time.Unix(st.Atim.Unix()), Format: tar.FormatPAX}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFCHR:
			h.Typeflag, h.Devmajor, h.Devminor = tar.TypeChar, int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev))
		case unix.S_IFBLK:
			h.Typeflag, h.Devmajor, h.Devminor = tar.TypeBlock, int64(unix.Major(st.Rdev)), int64(unix.Minor(st.Rdev))
		case unix.S_IFDIR:
			h.Typeflag, h.Name = tar.TypeDir, rel+"/"
		case unix.S_IFLNK:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			h.Typeflag, h.Linkname = tar.TypeSymlink, target
		case unix.S_IFIFO:
			h.Typeflag = tar.TypeFifo
		case unix.S_IFREG:
			if st.Nlink > 1 {
				if first, ok := links[st.Ino]; ok {
					return tw.WriteHeader(&tar.Header{Name: rel, Typeflag: tar.TypeLink, Linkname: first, Format: tar.FormatPAX})
				}
				links[st.Ino] = rel
			}
			h.Typeflag, h.Size = tar.TypeReg, st.Size
		default:
			return nil // a socket: no tar form, as on ns's walk (not a change)
		}
		h.PAXRecords = userXattrs(p)
		if h.Typeflag == tar.TypeDir && opaque(p) {
			if h.PAXRecords == nil {
				h.PAXRecords = map[string]string{}
			}
			h.PAXRecords[wire.VMUpperOpaque] = "y"
		}
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if h.Typeflag == tar.TypeReg {
			return copyInto(tw, p, h.Size)
		}
		return nil
	})
}

func copyInto(tw *tar.Writer, p string, size int64) error {
	f, err := os.Open(p)
	if err != nil {
		return err
	}
	defer f.Close()
	n, err := io.Copy(tw, f)
	if err == nil && n != size {
		err = fmt.Errorf("%s: %d bytes, not %d", p, n, size)
	}
	return err
}

func opaque(p string) bool {
	b := make([]byte, 8)
	n, err := unix.Lgetxattr(p, "trusted.overlay.opaque", b)
	return err == nil && n == 1 && b[0] == 'y'
}

// userXattrs are p's user.* extended attributes as PAX records.
func userXattrs(p string) map[string]string {
	sz, err := unix.Llistxattr(p, nil)
	if err != nil || sz == 0 {
		return nil
	}
	buf := make([]byte, sz)
	if sz, err = unix.Llistxattr(p, buf); err != nil {
		return nil
	}
	var recs map[string]string
	for k := range strings.SplitSeq(string(buf[:sz]), "\x00") {
		if !strings.HasPrefix(k, "user.") {
			continue
		}
		v := make([]byte, 64<<10)
		n, err := unix.Lgetxattr(p, k, v)
		if err != nil {
			continue
		}
		if recs == nil {
			recs = map[string]string{}
		}
		recs["SCHILY.xattr."+k] = string(v[:n])
	}
	return recs
}
