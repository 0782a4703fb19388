package testreq

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// mountNSChildEnv makes this test binary, started by TestOwnMountNamespace,
// call OwnMountNamespace and print its mount namespace instead of testing.
const mountNSChildEnv = "DRYEXEC_TESTREQ_MOUNTNS_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(mountNSChildEnv) == "1" {
		OwnMountNamespace()
		ns, err := os.Readlink("/proc/self/ns/mnt")
		if err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		fmt.Print(ns, " ", os.Getenv(ownMountsEnv))
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestOwnMountNamespace: a test binary that calls OwnMountNamespace as root
// runs on in a mount namespace other than its parent's, re-executed once
// (the marker set), so that its mounts are not the host's.
func TestOwnMountNamespace(t *testing.T) {
	NeedRoot(t)
	NeedTool(t, "unshare")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ours, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, ownMountsEnv+"=") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Env = append(cmd.Env, mountNSChildEnv+"=1")
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the child: %v", err)
	}
	ns, marker, _ := strings.Cut(string(out), " ")
	if ns == ours || marker != "1" {
		t.Errorf("the child ran in %s (marker %q), we run in %s: want another namespace, re-executed once", ns, marker, ours)
	}
}
