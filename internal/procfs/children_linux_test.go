package procfs

import (
	"os"
	"os/exec"
	"slices"
	"testing"
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
