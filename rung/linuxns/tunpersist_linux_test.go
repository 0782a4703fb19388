package linuxns

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
)

// TestLazyTUNPersistUntilHandedOver: while the guest holds the sandbox's TUN
// device (a trial whose network is none, before it sends anything), the
// device is persistent, so that the guest's exit does not wait for its
// removal (tun.SetPersist); once handed to netsim it is not, so that a
// netsim that dies takes the device with it and the sandbox's connections
// fail at once instead of hanging. The command reads the device's flags
// before it sends anything and again after a DNS lookup has had netsim's
// answer, which proves the hand-over done.
func TestLazyTUNPersistUntilHandedOver(t *testing.T) {
	requireNS(t)
	dir := t.TempDir()
	flags := "cat /sys/class/net/dx0/tun_flags"
	d := runTrial(t, dir, dryexec.TrialSpec{NetCADir: filepath.Join(dir, "ca")}, "sh", "-c",
		flags+"; getent hosts dryexec-persist.invalid; echo lookup $?; "+flags)
	lines := strings.Fields(d.Process.Stdout)
	if len(lines) != 4 || lines[1] != "lookup" {
		t.Fatalf("stdout %q (stderr %q): want the flags, the lookup's status, the flags", d.Process.Stdout, d.Process.Stderr)
	}
	persist := func(s string) bool {
		v, err := strconv.ParseUint(s, 0, 32)
		if err != nil {
			t.Fatalf("tun_flags %q: %v", s, err)
		}
		return v&unix.IFF_PERSIST != 0
	}
	if !persist(lines[0]) {
		t.Errorf("tun_flags %s before anything was sent: the device the guest holds is not persistent, so the guest's exit waits for its removal", lines[0])
	}
	if persist(lines[3]) {
		t.Errorf("tun_flags %s after netsim answered: the device netsim serves is persistent", lines[3])
	}
	if len(d.Network) == 0 {
		t.Errorf("no network event logged for the lookup: netsim did not get the device (stdout %q)", d.Process.Stdout)
	}
}
