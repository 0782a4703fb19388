package guest

import (
	"testing"

	"golang.org/x/sys/unix"
)

// TestNewFIFOMode: the FIFO the host makes for a VM's command has the bits
// its mknod(2) gets on ns. A caller not in a set-group-ID directory's group
// and without CAP_FSETID asking for S_ISGID (a FIFO setgid to a group it
// is not in, which the host, root, would set) loses it, as the kernel
// strips it; setuid and sticky are the caller's to keep, as on ns.
func TestNewFIFOMode(t *testing.T) {
	user := &callerCreds{fsuid: 4321, fsgid: 4321, groups: []int{4321}}
	member := &callerCreds{fsuid: 4321, fsgid: 4321, groups: []int{4321, 1234}, umask: 0o022}
	fsetid := &callerCreds{fsuid: 4321, fsgid: 4321, capEff: 1 << unix.CAP_FSETID}
	sgidDir := &unix.Stat_t{Mode: unix.S_IFDIR | 0o2777, Gid: 1234}
	plainDir := &unix.Stat_t{Mode: unix.S_IFDIR | 0o777, Gid: 1234}
	for _, c := range []struct {
		name      string
		dir       *unix.Stat_t
		cr        *callerCreds
		mode      uint32
		perm, gid uint32
	}{
		{"setgid dir, not in its group", sgidDir, user, unix.S_IFIFO | 0o7777, 0o5777, 1234},
		{"setgid dir, in its group (umask)", sgidDir, member, unix.S_IFIFO | 0o7777, 0o7755, 1234},
		{"setgid dir, CAP_FSETID", sgidDir, fsetid, unix.S_IFIFO | 0o6777, 0o6777, 1234},
		{"plain dir: the caller's group, its bits", plainDir, user, unix.S_IFIFO | 0o7777, 0o7777, 4321},
	} {
		perm, gid := newFIFOMode(c.dir, c.cr, c.mode)
		if perm != c.perm || gid != c.gid {
			t.Errorf("%s: %o %d, want %o %d", c.name, perm, gid, c.perm, c.gid)
		}
	}
}
