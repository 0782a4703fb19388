package vm_test

import (
	"crypto/sha256"
	"encoding/hex"
	"io"
	"strconv"
	"testing"

	"github.com/dryexec/dryexec/internal/imagetest"
	"github.com/dryexec/dryexec/internal/rungcompare"
	"github.com/dryexec/dryexec/rung/vm"
)

// bulkImage is an image of the tools that write much (dd, seq, xargs,
// touch), at /w, pushed to a registry on loopback.
func bulkImage(t *testing.T) string {
	t.Helper()
	t.Setenv("DOCKER_CONFIG", t.TempDir())
	tools := imagetest.Tools(t, "dd", "seq", "xargs", "touch", "mkdir", "ls", "cat")
	img := imagetest.Image(t, imagetest.Config{Env: []string{"PATH=/bin"}, WorkingDir: "/w"},
		tools, imagetest.Layer(t, imagetest.Entry{Name: "w/keep", Body: []byte("k\n")}))
	ref := imagetest.Registry(t) + "/vm/bulk:1"
	imagetest.Push(t, ref, img)
	return ref
}

// TestImageManyFilesSameAsNS: a trial on an image making more entries than
// the VM's tmpfs had inodes for (half its pages: 32768 in a VM of 256 MiB,
// ≈ 58k entries in one of 512 MiB; then ENOSPC, and no violation) gets
// what ns gives, the VM's upper dir being on the work drive
// with as many inodes as ns's upper tmpfs; one filling --upper-size gets
// ns's {kind: limit} violation, the VM's guest saying its drive was full.
func TestImageManyFilesSameAsNS(t *testing.T) {
	requireVM(t)
	rungcompare.ImageSameDeltaAsNS(t, vm.Name, bulkImage(t), []rungcompare.Case{
		{Name: "36k_files", Args: []string{"--memory", "268435456", "--", "sh", "-c", `mkdir m && cd m && seq 1 36000 | xargs touch; echo $?; ls 1 35999 36000`}},
		// ext4 counts a directory's blocks, tmpfs does not: how much of
		// the budget the file gets differs by a few KiB.
		{Name: "upper_full", Args: []string{"--upper-size", "8388608", "--", "sh", "-c", `dd if=/dev/zero of=big bs=1M count=16 2>/dev/null; echo $?; ls big`}, SizesDiffer: true},
	})
}

// TestImageWritesPastRAM: a trial on an image may write more than its VM's
// RAM, up to --upper-size, and its delta has all of it (the VM's upper
// dir is on the work drive, not in its memory); past --upper-size it is
// the {kind: limit} violation, as on ns.
func TestImageWritesPastRAM(t *testing.T) {
	requireVM(t)
	ref := bulkImage(t)
	home := t.TempDir()
	const mb = 320 // the VM has 256 MiB of RAM (--memory)
	code, d := rungcompare.CLIRun(t, home, vm.Name, "", "--image", ref, "--no-store", "--memory", "268435456",
		"--upper-size", strconv.Itoa(400<<20), "--", "sh", "-c", "dd if=/dev/zero of=big bs=1M count="+strconv.Itoa(mb)+" 2>/dev/null; echo $?")
	h := sha256.New()
	io.CopyN(h, zeros{}, mb<<20)
	want := hex.EncodeToString(h.Sum(nil))
	var got int64
	sum := ""
	for _, f := range d.Files {
		if f.Path == "/w/big" {
			got, sum = f.Size, f.SHA256
		}
	}
	if code != 0 || d.Process.Stdout != "0\n" || got != mb<<20 || sum != want || len(d.Violations) != 0 || d.Incomplete {
		t.Errorf("exit %d, stdout %q (stderr %q), /w/big %d bytes sha256 %s, violations %+v, incomplete %v (%s): want 0, %d bytes of zeros, none",
			code, d.Process.Stdout, d.Process.Stderr, got, sum, d.Violations, d.Incomplete, d.IncompleteReason, mb<<20)
	}
	code, d = rungcompare.CLIRun(t, home, vm.Name, "", "--image", ref, "--no-store", "--memory", "268435456",
		"--upper-size", strconv.Itoa(200<<20), "--", "sh", "-c", "dd if=/dev/zero of=big bs=1M count="+strconv.Itoa(mb)+" 2>/dev/null; echo $?")
	if len(d.Violations) != 1 || d.Violations[0].Kind != "limit" || d.Process.Stdout != "1\n" {
		t.Errorf("past --upper-size: exit %d, stdout %q, violations %+v: want dd's failure and one limit violation", code, d.Process.Stdout, d.Violations)
	}
}

type zeros struct{}

func (zeros) Read(b []byte) (int, error) {
	clear(b)
	return len(b), nil
}
