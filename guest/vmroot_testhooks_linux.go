//go:build dryexec_testhooks

package guest

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/internal/testhooks"
	"github.com/dryexec/dryexec/wire"
)

// vmRootHook does, when cfg's argv holds testhooks.VMRootEnv=1, what root
// in the VM can do to the 9p view beyond the command (which runs in a user
// namespace of its own), in the command's working directory, and creates
// testhooks.VMRootDone there last. What failed is written to
// vm-root-errors beside it: the test reads it from the delta.
func vmRootHook(cfg *wire.TrialStart) {
	if !slices.Contains(cfg.Argv, testhooks.VMRootEnv+"=1") {
		return
	}
	var errs []string
	if cmdline, err := os.ReadFile("/proc/cmdline"); err != nil || !strings.Contains(string(cmdline), "-- guest "+wire.RoleVMInit) {
		errs = append(errs, "refused: not in a dryexec VM")
	} else {
		errs = vmRootAttacks(cfg.Cwd)
	}
	os.WriteFile(filepath.Join(cfg.Cwd, "vm-root-errors"), []byte(strings.Join(errs, "\n")), 0o644)
	os.WriteFile(filepath.Join(cfg.Cwd, testhooks.VMRootDone), nil, 0o644)
}

func vmRootAttacks(dir string) []string {
	var errs []string
	try := func(what string, err error) {
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", what, err))
		}
	}
	at := func(name string) string { return filepath.Join(dir, name) }
	try("mknod mem", unix.Mknod(at("mem"), unix.S_IFCHR|0o666, int(unix.Mkdev(1, 1))))
	try("mknod disk", unix.Mknod(at("disk"), unix.S_IFBLK|0o666, int(unix.Mkdev(8, 0))))
	try("write suid", os.WriteFile(at("suid"), []byte("#!/bin/sh\nid\n"), 0o755))
	try("chown suid", os.Chown(at("suid"), 0, 0))
	try("chmod suid", os.Chmod(at("suid"), 0o4755))
	// A VFS capability (v2): every permitted and effective capability.
	cap := make([]byte, 20)
	binary.LittleEndian.PutUint32(cap, 0x02000001)
	binary.LittleEndian.PutUint32(cap[4:], ^uint32(0))
	binary.LittleEndian.PutUint32(cap[12:], ^uint32(0))
	try("security.capability", unix.Setxattr(at("suid"), "security.capability", cap, 0))
	try("trusted.dryexec", unix.Setxattr(at("suid"), "trusted.dryexec", []byte("x"), 0))
	// The overlay's own markers, on a host dir: opaque would hide its
	// host files from the walk.
	try("trusted.overlay.opaque", unix.Setxattr(at("sub"), "trusted.overlay.opaque", []byte("y"), 0))
	try("trusted.overlay.overlay.opaque", unix.Setxattr(at("sub"), "trusted.overlay.overlay.opaque", []byte("y"), 0))
	try("symlink", os.Symlink("/etc", at("esc")))
	try("write through the symlink", os.WriteFile(at("esc/dryexec-vm-root"), []byte("x"), 0o644))
	try("hard link", os.Link(at("hostfile"), at("hostfile-link")))
	try("newline name", os.WriteFile(at("a\nb"), []byte("nl"), 0o644))
	try("long name", os.WriteFile(at(strings.Repeat("n", 255)), []byte("long"), 0o644))
	try("dotdot", os.WriteFile(at("../../../../../../../../dryexec-vm-root-top"), []byte("x"), 0o644))
	unix.Sync()
	return errs
}
