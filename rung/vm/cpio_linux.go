package vm

import (
	"fmt"
	"io"
)

// cpioWriter writes a cpio archive in the "newc" format, the one the Linux
// kernel unpacks as an initramfs (Documentation/driver-api/early-userspace/
// buffer-format.rst): every header ASCII hex, names and data padded to four
// bytes, ended by the entry TRAILER!!!. It holds only what dryexec puts in
// an initramfs: directories, regular files and device nodes.
type cpioWriter struct {
	w   io.Writer
	off int64
	ino int
	err error
}

// cpio mode bits (the file type is in the mode, as in stat).
const (
	cpioDir  = 0o040000
	cpioFile = 0o100000
	cpioChar = 0o020000
)

func (c *cpioWriter) write(b []byte) {
	if c.err != nil {
		return
	}
	n, err := c.w.Write(b)
	c.off += int64(n)
	c.err = err
}

func (c *cpioWriter) pad() {
	if r := c.off % 4; r != 0 {
		c.write(make([]byte, 4-r))
	}
}

// entry writes one header, its name and data (size bytes of data, which
// must be exactly that long).
func (c *cpioWriter) entry(name string, mode uint32, rdevMajor, rdevMinor uint32, size int64, data io.Reader) error {
	c.ino++
	nlink := 1
	if mode&0o170000 == cpioDir {
		nlink = 2
	}
	// mtime 0: the archive's bytes depend on its inputs only, so equal
	// inputs give an equal digest.
	hdr := fmt.Sprintf("070701%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x%08x",
		c.ino, mode, 0, 0, nlink, 0, size, 0, 0, rdevMajor, rdevMinor, len(name)+1, 0)
	c.write([]byte(hdr))
	c.write(append([]byte(name), 0))
	c.pad()
	if data != nil && c.err == nil {
		n, err := io.CopyN(c.w, data, size)
		c.off += n
		if err != nil {
			c.err = fmt.Errorf("cpio %s: %w", name, err)
		}
	}
	c.pad()
	return c.err
}

func (c *cpioWriter) dir(name string) error { return c.entry(name, cpioDir|0o755, 0, 0, 0, nil) }

func (c *cpioWriter) file(name string, perm uint32, size int64, data io.Reader) error {
	return c.entry(name, cpioFile|perm, 0, 0, size, data)
}

func (c *cpioWriter) charDev(name string, perm, major, minor uint32) error {
	return c.entry(name, cpioChar|perm, major, minor, 0, nil)
}

// close writes the trailer.
func (c *cpioWriter) close() error {
	return c.entry("TRAILER!!!", 0, 0, 0, 0, nil)
}
