package procfs

import (
	"os"
	"os/exec"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// TestChildren: a child this process started is listed with its comm and
// argv; the filter's refusal and another process's child are not.
func TestChildren(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	pid := cmd.Process.Pid
	got := Children(os.Getpid(), func(comm string, argv []string) bool {
		return comm == "sleep" && slices.Equal(argv, []string{"sleep", "30"})
	})
	if !slices.Contains(got, pid) {
		t.Errorf("Children found %v, want %d among them", got, pid)
	}
	if got := Children(os.Getpid(), func(string, []string) bool { return false }); len(got) != 0 {
		t.Errorf("Children with a filter refusing all: %v", got)
	}
	if got := Children(pid, func(string, []string) bool { return true }); len(got) != 0 {
		t.Errorf("children of sleep: %v", got)
	}
}

// TestTaskChildren: a child this process started is listed, whichever of
// its threads started it; a process without children has none.
func TestTaskChildren(t *testing.T) {
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	if got := TaskChildren(os.Getpid()); !slices.Contains(got, cmd.Process.Pid) {
		t.Errorf("TaskChildren found %v, want %d among them", got, cmd.Process.Pid)
	}
	if got := TaskChildren(cmd.Process.Pid); len(got) != 0 {
		t.Errorf("children of sleep: %v", got)
	}
}

// TestSplitStat: a command name with spaces and parentheses does not shift
// the fields after it.
func TestSplitStat(t *testing.T) {
	tests := []struct {
		stat, comm, minflt string
		ok                 bool
	}{
		{"12 (sh) S 1 12 12 0 -1 4194560 321 0 0 0", "sh", "321", true},
		{"12 (a) b (c)) R 1 12 12 0 -1 4194560 77 0 0 0", "a) b (c)", "77", true},
		{"12 sh S 1", "", "", false},
	}
	for _, tt := range tests {
		comm, f, ok := splitStat([]byte(tt.stat))
		if ok != tt.ok || comm != tt.comm || (ok && f[7] != tt.minflt) {
			t.Errorf("splitStat(%q) = %q, %q, %v; want %q, minflt %q, %v", tt.stat, comm, f, ok, tt.comm, tt.minflt, tt.ok)
		}
	}
}

// TestMinorFaults: touching fresh pages raises this process's count by at
// least as many; a process that is gone reads as false.
func TestMinorFaults(t *testing.T) {
	before, ok := MinorFaults(os.Getpid())
	if !ok {
		t.Fatal("MinorFaults of this process: not read")
	}
	const pages = 64
	b, err := unix.Mmap(-1, 0, pages*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(b)
	for i := 0; i < len(b); i += 4096 {
		b[i] = 1
	}
	after, _ := MinorFaults(os.Getpid())
	if after-before < pages {
		t.Errorf("%d minor faults counted for %d fresh pages touched", after-before, pages)
	}
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if n, ok := MinorFaults(cmd.Process.Pid); ok {
		t.Errorf("a reaped process read as %d faults", n)
	}
}
