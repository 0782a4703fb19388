package vm

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/testreq"
)

// TestFIFOStaysInTheView: the host makes and chmods the FIFOs a vm trial's
// command asks for (QEMU's 9p server can do neither), resolved as the VM
// resolves them, beneath the view. Through a link the command made to a
// host directory, a path that climbs above the root with "..", and a chmod
// of a host FIFO through that link, every change is the view's, in the
// delta; the host directory and its FIFO are untouched. A FIFO on the VM's
// own /dev/shm is the VM's (made, not in the delta); a device node stays
// refused. A FIFO asked for with setgid in a set-group-ID dir whose group
// the caller is not in has no setgid bit, as ns's kernel strips it.
func TestFIFOStaysInTheView(t *testing.T) {
	if testing.Short() {
		t.Skip("boots a VM")
	}
	// testRung's, with time for a boot under TCG on a loaded host.
	r := &Rung{GuestExe: staticGuest(t), BootTimeout: 5 * time.Minute}
	testreq.Need(t, testreq.VM, r.Available(context.Background()))
	dir := t.TempDir()
	host := filepath.Join(t.TempDir(), "hostdir")
	if err := os.Mkdir(host, 0o755); err != nil {
		t.Fatal(err)
	}
	hostFIFO := filepath.Join(host, "hf")
	if err := unix.Mkfifo(hostFIFO, 0o600); err != nil {
		t.Fatal(err)
	}
	climb := strings.Repeat("../", 12) + strings.TrimPrefix(host, "/")
	d := runTrial(t, r, dir, dryexec.TrialSpec{}, "sh", "-c", "ln -s "+host+" link; mkfifo link/p; echo p=$?; "+
		"mkfifo "+climb+"/q; echo q=$?; chmod 0666 link/hf; echo hf=$?; mkfifo link/p 2>/dev/null; echo again=$?; "+
		"mkfifo /dev/shm/s; echo shm=$?; mknod link/dev c 1 3 2>/dev/null; echo dev=$?; "+
		"cat link/p > got & echo through > link/p; wait; cat got; "+
		// As ns's mknod: in a set-group-ID dir of a group the caller is
		// not in, no setgid bit (the host, root, would set it); setuid kept.
		`mkdir sg; chgrp 1234 sg; chmod 2777 sg; python3 -c "import os; os.setgid(4321); os.setuid(4321); os.umask(0); os.mknod('sg/f', 0o16777)"; echo sg=$?`)
	want := "p=0\nq=0\nhf=0\nagain=1\nshm=0\ndev=1\nthrough\nsg=0\n"
	if d.Process.Stdout != want || d.Incomplete {
		t.Errorf("stdout %q (stderr %q), want %q; incomplete %v %s", d.Process.Stdout, d.Process.Stderr, want, d.Incomplete, d.IncompleteReason)
	}
	ents, err := os.ReadDir(host)
	if err != nil {
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(hostFIFO, &st); err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || st.Mode != unix.S_IFIFO|0o600 {
		t.Fatalf("the host dir changed: %d entries, its FIFO's mode %o", len(ents), st.Mode)
	}
	// The last change of each path: a host FIFO chmodded is deleted and
	// made again, as on ns.
	files := map[string]dryexec.FileChange{}
	for _, f := range d.Files {
		files[f.Path] = f
	}
	for name, w := range map[string]struct {
		op   dryexec.Op
		mode string
	}{"p": {dryexec.OpCreate, "0644"}, "q": {dryexec.OpCreate, "0644"}, "hf": {dryexec.OpCreate, "0666"}} {
		if f := files[filepath.Join(host, name)]; f.Kind != dryexec.KindFIFO || f.Op != w.op || f.Mode != w.mode {
			t.Errorf("%s: %+v, want a FIFO %s %s", name, f, w.op, w.mode)
		}
	}
	if f := files[filepath.Join(dir, "sg", "f")]; f.Kind != dryexec.KindFIFO || f.Mode != "4777" {
		t.Errorf("sg/f: %+v, want a FIFO 4777 (no setgid: the caller is not in sg's group)", f)
	}
	if _, ok := files[filepath.Join(host, "dev")]; ok {
		t.Errorf("a device node in the delta")
	}
}
