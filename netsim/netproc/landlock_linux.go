package netproc

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Landlock access rights by the ABI that introduced them.
const (
	fsABI1 = unix.LANDLOCK_ACCESS_FS_EXECUTE | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_READ_FILE |
		unix.LANDLOCK_ACCESS_FS_READ_DIR | unix.LANDLOCK_ACCESS_FS_REMOVE_DIR | unix.LANDLOCK_ACCESS_FS_REMOVE_FILE |
		unix.LANDLOCK_ACCESS_FS_MAKE_CHAR | unix.LANDLOCK_ACCESS_FS_MAKE_DIR | unix.LANDLOCK_ACCESS_FS_MAKE_REG |
		unix.LANDLOCK_ACCESS_FS_MAKE_SOCK | unix.LANDLOCK_ACCESS_FS_MAKE_FIFO | unix.LANDLOCK_ACCESS_FS_MAKE_BLOCK |
		unix.LANDLOCK_ACCESS_FS_MAKE_SYM
	readFile = unix.LANDLOCK_ACCESS_FS_READ_FILE
	readTree = unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_READ_DIR
	execFile = unix.LANDLOCK_ACCESS_FS_READ_FILE | unix.LANDLOCK_ACCESS_FS_EXECUTE
)

// resolverFiles are what Go's resolver (and libc's, in a cgo build) reads to
// resolve the names allow rules forward to, and /etc/localtime for the log's
// timestamps. Read only; a missing one is skipped.
var resolverFiles = []string{"/etc/resolv.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/host.conf", "/etc/gai.conf", "/etc/localtime"}

// ruleset builds the role's Landlock ruleset, or returns -1 when the kernel
// has no Landlock (the role then runs under its seccomp filter and uid
// alone; Confinement.Landlock says so). Every filesystem right the ABI knows
// is handled, and granted only:
//
//   - read and execute on exe and on every file this process maps (the
//     dynamic loader and libraries of a cgo build: the role runs the same
//     binary, or one beside it built the same way): exec needs them;
//   - read beneath the mock file's directory: a mock file names its bodies
//     and OpenAPI documents by paths relative to it;
//   - read on the resolver's files (resolverFiles).
//
// Nothing is writable anywhere. With ABI 4 binding TCP ports is handled and
// granted nowhere (the role listens on nothing of the host's; connecting is
// not handled: allow rules forward to any port); with ABI 6 signals and
// abstract unix sockets are scoped to the role's own domain.
func ruleset(exe, mockFile string) (int, error) {
	abi, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if e != 0 {
		return -1, nil
	}
	attr := unix.LandlockRulesetAttr{Handled_access_fs: fsABI1}
	size := uintptr(8)
	if abi >= 2 {
		attr.Handled_access_fs |= unix.LANDLOCK_ACCESS_FS_REFER
	}
	if abi >= 3 {
		attr.Handled_access_fs |= unix.LANDLOCK_ACCESS_FS_TRUNCATE
	}
	if abi >= 4 {
		attr.Handled_access_net = unix.LANDLOCK_ACCESS_NET_BIND_TCP
		size = 16
	}
	if abi >= 5 {
		attr.Handled_access_fs |= unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	}
	if abi >= 6 {
		attr.Scoped = unix.LANDLOCK_SCOPE_SIGNAL | unix.LANDLOCK_SCOPE_ABSTRACT_UNIX_SOCKET
		size = 24
	}
	fd, _, e := unix.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if e != 0 {
		return -1, fmt.Errorf("netproc: landlock_create_ruleset: %w", e)
	}
	rs := int(fd)
	fail := func(err error) (int, error) {
		unix.Close(rs)
		return -1, err
	}
	files, err := mappedFiles()
	if err != nil {
		return fail(err)
	}
	for _, f := range append([]string{exe}, files...) {
		if err := addRule(rs, f, execFile); err != nil {
			return fail(err)
		}
	}
	if mockFile != "" {
		dir, err := filepath.Abs(filepath.Dir(mockFile))
		if err != nil {
			return fail(err)
		}
		// A directory that is not there is the mock file's error to
		// report (netsim.New in the role), not the ruleset's.
		if err := addRule(rs, dir, readTree); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fail(err)
		}
	}
	for _, f := range resolverFiles {
		if err := addRule(rs, f, readFile); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fail(err)
		}
	}
	return rs, nil
}

// mappedFiles lists the files this process maps (its binary, the loader and
// libraries), from /proc/self/maps.
func mappedFiles() ([]string, error) {
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	seen := map[string]bool{}
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || !strings.HasPrefix(fields[5], "/") || strings.HasSuffix(sc.Text(), "(deleted)") {
			continue
		}
		p := fields[5]
		if !seen[p] {
			seen[p] = true
			out = append(out, p)
		}
	}
	return out, sc.Err()
}

// addRule grants access beneath path (a file: on the file itself). A
// directory's rule cannot carry file-only rights and vice versa, so access
// is cut to what the kind of path allows.
func addRule(rs int, path string, access uint64) error {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("netproc: landlock rule for %s: %w", path, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("netproc: landlock rule for %s: %w", path, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		access &= execFile | unix.LANDLOCK_ACCESS_FS_WRITE_FILE | unix.LANDLOCK_ACCESS_FS_TRUNCATE | unix.LANDLOCK_ACCESS_FS_IOCTL_DEV
	}
	r := unix.LandlockPathBeneathAttr{Allowed_access: access, Parent_fd: int32(fd)}
	if _, _, e := unix.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(rs), unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&r)), 0, 0, 0); e != 0 {
		return fmt.Errorf("netproc: landlock rule for %s: %w", path, e)
	}
	return nil
}
