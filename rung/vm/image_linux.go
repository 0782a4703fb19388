package vm

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/wire"
)

// KernelEnv names a kernel to boot instead of the newest /boot/vmlinuz-*:
// an uncompressed vmlinux (ELF) or a bzImage, whose payload is extracted.
const KernelEnv = "DRYEXEC_VM_KERNEL"

// vmModules are the modules the VM needs, by name, when its kernel has them
// as modules (Debian's does): the virtio-mmio transport of microvm's
// devices, virtio-serial for the wire, 9p for the view, virtio-net for
// netsim, and virtio-blk, erofs, overlayfs and ext4 for a root on an OCI
// image (the image's erofs drive under an overlay of the VM's, its upper
// dir on an ext4 drive: wire.VMWorkSerial; erofs needs
// libcrc32c, whose init asks the crypto API for crc32c, a soft dependency
// modules.dep does not list: crc32c_generic goes first), and virtio's
// vsock transport for a VM on Firecracker (the wire over vsock: no
// virtio-serial there). modules.dep gives their dependencies.
func vmModules() []string {
	return []string{"virtio_mmio", "virtio_console", "9pnet_virtio", "9p", "virtio_net", "virtio_blk", "crc32c_generic", "erofs", "overlay", "vmw_vsock_virtio_transport", "ext4"}
}

// Kernel is what a VM boots: the uncompressed kernel and the directory of
// its modules ("" when the kernel has what it needs built in).
type Kernel struct {
	Vmlinux string
	Modules string
	Version string
	// Digest is the sha256 of the vmlinux, which pins it.
	Digest string
}

// cacheDir is where extracted kernels and built initramfs images are kept:
// dir, else $DRYEXEC_HOME/vm (dryexec.DefaultHome).
func cacheDir(dir string) (string, error) {
	if dir == "" {
		home, err := dryexec.DefaultHome(os.Getenv)
		if err != nil {
			return "", err
		}
		dir = filepath.Join(home, "vm")
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("the vm cache dir: %w", err)
	}
	return dir, nil
}

// FindKernel returns the kernel to boot: path, else $DRYEXEC_VM_KERNEL,
// else the newest /boot/vmlinuz-* (Debian's linux-image-amd64). A
// compressed kernel is extracted once into cache (the vmlinux QEMU's
// microvm needs), named by the compressed file's digest, so a kernel
// upgrade extracts the new one and the old stays valid until removed.
func FindKernel(ctx context.Context, path, cache string) (*Kernel, error) {
	path = cmpOr(path, os.Getenv(KernelEnv))
	if path == "" {
		cands, _ := filepath.Glob("/boot/vmlinuz-*")
		if len(cands) == 0 {
			return nil, errors.New("no kernel: no /boot/vmlinuz-* (`make deps` installs Debian's linux-image-amd64) and no " + KernelEnv)
		}
		slices.SortFunc(cands, compareVersions)
		path = cands[len(cands)-1]
	}
	k := &Kernel{}
	base := filepath.Base(path)
	for _, p := range []string{"vmlinuz-", "vmlinux-"} {
		if v, ok := strings.CutPrefix(base, p); ok {
			k.Version = v
			if st, err := os.Stat("/lib/modules/" + v + "/modules.dep"); err == nil && st.Mode().IsRegular() {
				k.Modules = "/lib/modules/" + v
			}
		}
	}
	dir, err := cacheDir(cache)
	if err != nil {
		return nil, err
	}
	// Reading and hashing the kernel (8 MB) costs about 30 ms, on every
	// trial: its digest is kept by the file's identity (path, inode,
	// size, mtime), as the initramfs's inputs are, and read again only
	// when the file is another.
	known := kernelIdentity(dir, path)
	if b, err := os.ReadFile(known); known != "" && err == nil {
		if rawSum, kind, ok := strings.Cut(strings.TrimSpace(string(b)), " "); ok && len(rawSum) == 64 {
			switch kind {
			case "elf":
				k.Vmlinux, k.Digest = path, rawSum
				return k, nil
			case "compressed":
				out := filepath.Join(dir, "vmlinux-"+rawSum[:32])
				if d, err := os.ReadFile(out + ".sha256"); err == nil {
					if _, err := os.Stat(out); err == nil {
						k.Vmlinux, k.Digest = out, strings.TrimSpace(string(d))
						return k, nil
					}
				}
			}
		}
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading the kernel: %w", err)
	}
	sum := sha256.Sum256(raw)
	if bytes.HasPrefix(raw, []byte(elf.ELFMAG)) {
		k.Vmlinux, k.Digest = path, hex.EncodeToString(sum[:])
		rememberKernel(known, k.Digest, "elf")
		return k, nil
	}
	out := filepath.Join(dir, "vmlinux-"+hex.EncodeToString(sum[:16]))
	if d, err := os.ReadFile(out + ".sha256"); err == nil {
		if _, err := os.Stat(out); err == nil {
			k.Vmlinux, k.Digest = out, strings.TrimSpace(string(d))
			rememberKernel(known, hex.EncodeToString(sum[:]), "compressed")
			return k, nil
		}
	}
	vmlinux, err := extractVmlinux(ctx, raw)
	if err != nil {
		return nil, fmt.Errorf("extracting %s: %w", path, err)
	}
	vsum := sha256.Sum256(vmlinux)
	if err := writeAtomic(out, vmlinux); err != nil {
		return nil, err
	}
	k.Vmlinux, k.Digest = out, hex.EncodeToString(vsum[:])
	if err := writeAtomic(out+".sha256", []byte(k.Digest+"\n")); err != nil {
		return nil, err
	}
	rememberKernel(known, hex.EncodeToString(sum[:]), "compressed")
	return k, nil
}

// kernelIdentity is the file in dir that keeps the digest of the kernel at
// path while it is the same file: named by its path, device, inode, size
// and mtime. "" when the kernel cannot be stat'ed.
func kernelIdentity(dir, path string) string {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return ""
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%d\x00%d\x00%d\x00%d", path, st.Dev, st.Ino, st.Size, st.Mtim.Nano()))
	return filepath.Join(dir, "kernel-"+hex.EncodeToString(sum[:12]))
}

// rememberKernel writes what kernelIdentity's file keeps: the kernel
// file's sha256 and whether it is an ELF vmlinux or a compressed one. Best
// effort: without it the next call reads the kernel again.
func rememberKernel(known, rawSum, kind string) {
	if known != "" {
		writeAtomic(known, []byte(rawSum+" "+kind+"\n"))
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// compareVersions orders kernel file names by their version's numbers.
func compareVersions(a, b string) int {
	num := func(s string) []int {
		var out []int
		n, in := 0, false
		for _, c := range s {
			if c >= '0' && c <= '9' {
				n, in = n*10+int(c-'0'), true
				continue
			}
			if in {
				out = append(out, n)
			}
			n, in = 0, false
		}
		if in {
			out = append(out, n)
		}
		return out
	}
	return slices.Compare(num(a), num(b))
}

// payloads are the compressed formats a bzImage's payload may have, with
// the magic that starts it and the decompressor that reads it, as the
// kernel's own scripts/extract-vmlinux tries them. The decompressors are
// programs (Go's standard library has gzip and bzip2 only); Debian's
// kernels are xz, which xz-utils decompresses.
type payload struct {
	magic []byte
	argv  []string
}

func payloads() []payload {
	return []payload{
		{[]byte("\xfd7zXZ\x00"), []string{"xz", "-dc", "--single-stream"}},
		{[]byte("\x28\xb5\x2f\xfd"), []string{"zstd", "-dcq"}},
		{[]byte("\x1f\x8b\x08"), []string{"gzip", "-dc"}},
		{[]byte("BZh"), []string{"bzip2", "-dc"}},
		{[]byte("\x02\x21\x4c\x18"), []string{"lz4", "-dc"}},
		{[]byte("\x5d\x00\x00\x00"), []string{"unlzma", "-c"}},
	}
}

// extractVmlinux finds the compressed payload in a bzImage and
// decompresses it: the first candidate, at any offset, whose output is an
// ELF file is the kernel.
func extractVmlinux(ctx context.Context, raw []byte) ([]byte, error) {
	var tried []string
	for _, p := range payloads() {
		for off := 0; ; {
			i := bytes.Index(raw[off:], p.magic)
			if i < 0 {
				break
			}
			off += i
			if _, err := exec.LookPath(p.argv[0]); err != nil {
				tried = append(tried, p.argv[0]+" (not installed)")
				break
			}
			cmd := exec.CommandContext(ctx, p.argv[0], p.argv[1:]...)
			cmd.Stdin = bytes.NewReader(raw[off:])
			var out bytes.Buffer
			cmd.Stdout = &out
			// Trailing data after the stream makes some decompressors
			// exit non-zero with the whole kernel written: the output
			// decides.
			cmd.Run()
			if bytes.HasPrefix(out.Bytes(), []byte(elf.ELFMAG)) {
				return out.Bytes(), nil
			}
			off++
		}
	}
	if len(tried) > 0 {
		return nil, fmt.Errorf("no ELF kernel in it (tried %s)", strings.Join(tried, ", "))
	}
	return nil, errors.New("no compressed kernel payload in it (not a bzImage?)")
}

// writeAtomic writes b to path through a temporary file and a rename, so
// that a concurrent reader never sees it half written.
func writeAtomic(path string, b []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// moduleOrder returns the modules to load, dependencies first, from dir's
// modules.dep (each line "path: dep dep…", paths relative to dir); a
// module the kernel has built in is not in modules.dep and is skipped.
func moduleOrder(dir string, want []string) ([]string, error) {
	f, err := os.Open(filepath.Join(dir, "modules.dep"))
	if err != nil {
		return nil, err
	}
	defer f.Close()
	deps := map[string][]string{} // module path -> its dependencies' paths
	byName := map[string]string{}
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		mod, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok {
			continue
		}
		deps[mod] = strings.Fields(rest)
		byName[modName(mod)] = mod
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	var order []string
	seen := map[string]bool{}
	var visit func(string)
	visit = func(m string) {
		if seen[m] {
			return
		}
		seen[m] = true
		for _, d := range deps[m] {
			visit(d)
		}
		order = append(order, m)
	}
	for _, n := range want {
		if m, ok := byName[n]; ok {
			visit(m)
		}
	}
	return order, nil
}

// modName is a module's name from its path: the base name without .ko
// (and a compression suffix), with dashes as underscores.
func modName(p string) string {
	b := filepath.Base(p)
	b, _, _ = strings.Cut(b, ".ko")
	return strings.ReplaceAll(b, "-", "_")
}

// Initramfs returns the initramfs for k with guestExe as /init, building it
// into cache when no image of these inputs is there. The image's name is a
// digest of its inputs' identities (path, inode, size and mtime of the
// guest binary and of each module, and the layout's version): a rebuilt
// guest binary gives a new image, and an unchanged one is not read again.
func Initramfs(k *Kernel, guestExe, cache string) (string, error) {
	exe, err := filepath.EvalSymlinks(guestExe)
	if err != nil {
		return "", fmt.Errorf("finding the guest binary: %w", err)
	}
	if err := checkStatic(exe); err != nil {
		return "", err
	}
	var mods []string
	if k.Modules != "" {
		if mods, err = moduleOrder(k.Modules, vmModules()); err != nil {
			return "", fmt.Errorf("the kernel's modules: %w", err)
		}
	}
	h := sha256.New()
	fmt.Fprintf(h, "dryexec-initramfs-v1\x00%s\x00", k.Digest)
	for _, p := range append([]string{exe}, mods...) {
		full := p
		if p != exe {
			full = filepath.Join(k.Modules, p)
		}
		var st unix.Stat_t
		if err := unix.Stat(full, &st); err != nil {
			return "", fmt.Errorf("the initramfs's inputs: %w", err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00%d\x00%d\x00%d\x00", full, st.Dev, st.Ino, st.Size, st.Mtim.Nano())
	}
	dir, err := cacheDir(cache)
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "initramfs-"+hex.EncodeToString(h.Sum(nil)[:16])+".cpio")
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	var buf bytes.Buffer
	c := &cpioWriter{w: &buf}
	for _, d := range []string{"dev", "proc", "sys", "lib", "lib/modules", "newroot"} {
		c.dir(d)
	}
	// The kernel opens /dev/console for init's stdin, stdout and stderr.
	c.charDev("dev/console", 0o600, 5, 1)
	var names []string
	for _, m := range mods {
		if err := addFile(c, "lib/modules/"+modName(m)+".ko", filepath.Join(k.Modules, m), 0o644); err != nil {
			return "", err
		}
		names = append(names, modName(m))
	}
	list := []byte(strings.Join(names, "\n") + "\n")
	c.file(strings.TrimPrefix(wire.VMModules, "/"), 0o644, int64(len(list)), bytes.NewReader(list))
	if err := addFile(c, "init", exe, 0o755); err != nil {
		return "", err
	}
	if err := c.close(); err != nil {
		return "", err
	}
	if err := writeAtomic(out, buf.Bytes()); err != nil {
		return "", err
	}
	return out, nil
}

func addFile(c *cpioWriter, name, path string, perm uint32) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	return c.file(name, perm, st.Size(), io.LimitReader(f, st.Size()))
}

// ErrNotStatic is returned for a guest binary that needs a dynamic loader:
// the initramfs has no libc.
var ErrNotStatic = errors.New("the guest binary is dynamically linked (build it with CGO_ENABLED=0, as `make build` does)")

func checkStatic(exe string) error {
	f, err := elf.Open(exe)
	if err != nil {
		return fmt.Errorf("the guest binary %s: %w", exe, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s: %w", exe, ErrNotStatic)
		}
	}
	return nil
}
