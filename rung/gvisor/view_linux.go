package gvisor

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/dryexec/dryexec/internal/guestexe"
	"github.com/dryexec/dryexec/wire"
)

// ociSpec is the container's config.json: the inner guest (as role) as its process,
// root, with every capability (the command gets a user namespace of its own,
// as on ns), the view as its root (relative to the bundle), gVisor's own
// /proc, /dev and /sys, and no network.
func (b *box) ociSpec(role string) ([]byte, error) {
	exe := b.r.GuestExe
	if exe == "" {
		exe = guestexe.Executable()
	}
	if strings.HasPrefix(exe, "/proc/") {
		// The running binary: its host path, which the view shows too.
		self, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("finding the guest binary: %w", err)
		}
		exe = self
	}
	exe, err := filepath.EvalSymlinks(exe)
	if err != nil {
		return nil, fmt.Errorf("finding the guest binary: %w", err)
	}
	for _, h := range b.Cover.Hidden {
		if exe == h || strings.HasPrefix(exe, h+"/") {
			return nil, fmt.Errorf("the guest binary %s is beneath %s, which every sandbox hides", exe, h)
		}
	}
	host, _ := os.Hostname()
	// With netsim, runsc takes the sandbox's links from the view guest's
	// network namespace (its own, once it is runsc: /proc/self); without,
	// a new, empty one (runsc's --network=none gives loopback only).
	netns := map[string]string{"type": "network"}
	if b.net.GuestFile() != nil {
		netns["path"] = "/proc/self/ns/net"
	}
	caps := map[string][]string{"bounding": allCaps, "effective": allCaps, "permitted": allCaps}
	spec := map[string]any{
		"ociVersion": "1.0.2",
		"process": map[string]any{
			"user":         map[string]int{"uid": 0, "gid": 0},
			"args":         b.guestArgs(exe, role),
			"env":          []string{},
			"cwd":          "/",
			"capabilities": caps,
		},
		"root":     map[string]any{"path": wire.GVisorRoot, "readonly": false},
		"hostname": host,
		"mounts": []map[string]any{
			{"destination": "/proc", "type": "proc", "source": "proc"},
			{"destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": []string{"nosuid", "mode=755"}},
			{"destination": "/dev/pts", "type": "devpts", "source": "devpts"},
			{"destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": []string{"nosuid", "nodev", "mode=1777"}},
			{"destination": "/sys", "type": "sysfs", "source": "sysfs", "options": []string{"ro", "nosuid", "nodev", "noexec"}},
		},
		"linux": map[string]any{
			"namespaces": []map[string]string{{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}, netns},
		},
	}
	if b.image != nil {
		if err := b.imageSpec(spec); err != nil {
			return nil, err
		}
	} else if err := b.hostTmpSpec(spec); err != nil {
		return nil, err
	}
	return json.Marshal(spec)
}

// guestArgs is the container's process: the guest as role, or, when its
// control socket is runsc's stdin (box.ctrlStdin), a shell of the view
// that moves it to the guest's wire.CtrlFD first, stdin then /dev/null.
// The descriptor stays a dup of runsc's stdin inside gVisor, so that a
// restore hands it the restoring runsc's own.
func (b *box) guestArgs(exe, role string) []string {
	if !b.ctrlStdin {
		return []string{exe, "guest", role}
	}
	return []string{"/bin/sh", "-c", `exec "$0" guest "$1" ` + strconv.Itoa(wire.CtrlFD) + `<&0 </dev/null`, exe, role}
}

// allCaps are the capabilities the trial guest has inside gVisor (gVisor's
// own, which reach nothing of the host's).
var allCaps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL", "CAP_SETGID",
	"CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST", "CAP_NET_ADMIN",
	"CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER", "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT",
	"CAP_SYS_PTRACE", "CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE", "CAP_SYS_RESOURCE",
	"CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE", "CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL",
	"CAP_SETFCAP", "CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM", "CAP_BLOCK_SUSPEND",
	"CAP_AUDIT_READ",
}
