package bootstamp

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Path is the stamp file in dir (created 0700; under /run, a tmpfs a reboot
// empties, which only root writes) for binary — its path, device, inode,
// size and mtime, so that a rebuilt or replaced binary is probed again —
// with what else the probe depended on (a platform, a kernel digest), on
// this boot of the host. It returns "" when there is nowhere to keep one.
func Path(dir, binary string, with ...string) string {
	var st unix.Stat_t
	if err := unix.Stat(binary, &st); err != nil {
		return ""
	}
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return ""
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return ""
	}
	sum := sha256.Sum256(fmt.Appendf(nil, "%s\x00%d\x00%d\x00%d\x00%d\x00%s\x00%s",
		binary, st.Dev, st.Ino, st.Size, st.Mtim.Nano(), strings.Join(with, "\x00"), bytes.TrimSpace(boot)))
	return filepath.Join(dir, "ok-"+hex.EncodeToString(sum[:12]))
}
