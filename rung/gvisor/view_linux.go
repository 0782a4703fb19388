package gvisor

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/fsdelta"
	"github.com/dryexec/dryexec/internal/guestexe"
	"github.com/dryexec/dryexec/wire"
)

// walk walks every upper dir through the host's handle on the scratch
// tmpfs and diffs it with the host into d (its files, which may be spilled
// to spec.SpillDir, and its touched paths), as the ns rung's host diffs a
// guest's report. runsc and its sandbox are gone: nothing writes there any
// more. The walk runs in this process: the upper dirs are on the host side
// of gVisor, and fswalk.Walk passes the kernel one name at a time relative
// to a directory fd, never following a link the sandbox made. After a walk
// error, d holds what was walked before it.
func (t *trial) walk(ctx context.Context, deadline time.Time, d *dryexec.StateDelta) error {
	var err error
	t.expired, t.crossed, err = fsdelta.DiffScratch(ctx, fsdelta.Scratch{FD: t.scratchFD, Uppers: t.uppers,
		Hidden: append(slices.Clone(t.cover.Masks), t.cover.Hidden...), Deadline: deadline}, t.spec, d)
	return err
}

// ociSpec is the container's config.json: the trial guest as its process,
// root, with every capability (the command gets a user namespace of its own,
// as on ns), the view as its root (relative to the bundle), gVisor's own
// /proc, /dev and /sys, and no network.
func (t *trial) ociSpec() ([]byte, error) {
	exe := t.r.GuestExe
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
	for _, h := range t.cover.Hidden {
		if exe == h || strings.HasPrefix(exe, h+"/") {
			return nil, fmt.Errorf("the guest binary %s is beneath %s, which every sandbox hides", exe, h)
		}
	}
	host, _ := os.Hostname()
	// With netsim, runsc takes the sandbox's links from the view guest's
	// network namespace (its own, once it is runsc: /proc/self); without,
	// a new, empty one (runsc's --network=none gives loopback only).
	netns := map[string]string{"type": "network"}
	if t.net.GuestFile() != nil {
		netns["path"] = "/proc/self/ns/net"
	}
	caps := map[string][]string{"bounding": allCaps, "effective": allCaps, "permitted": allCaps}
	spec := map[string]any{
		"ociVersion": "1.0.2",
		"process": map[string]any{
			"user":         map[string]int{"uid": 0, "gid": 0},
			"args":         []string{exe, "guest", wire.RoleGVisorTrial},
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
	return json.Marshal(spec)
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
