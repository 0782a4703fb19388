package guest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec/containment/seccomp"
	"github.com/dryexec/dryexec/internal/testreq"
)

// linkSwapEnv names, in the re-executed test binary, the overlay's lower dir
// TestLinkSwapRaces works on.
const linkSwapEnv = "DRYEXEC_TEST_LINK_SWAP_LOWER"

// TestLinkSwapRaces: while the supervisor's worker swaps a rootless link's
// two names (swapLink), another thread of the caller renames the source away
// or makes a new file at its name. The link must still be there once the
// call reports success, and nothing the other thread made is replaced.
//
// The overlay is mounted in a user namespace of its own (a re-execution of
// this binary), where it cannot decode the copy's origin: the two names then
// show two identities, as in a rootless trial. The other thread acts at the
// swap's steps (renameWork.afterStep), so each interleaving is exact.
func TestLinkSwapRaces(t *testing.T) {
	if lower := os.Getenv(linkSwapEnv); lower != "" {
		linkSwapRaces(t, lower)
		return
	}
	testreq.NeedRoot(t)
	lower := t.TempDir()
	for _, f := range []string{"probe", "quiet", "away", "taken", "swapped"} {
		if err := os.WriteFile(filepath.Join(lower, f), []byte("mine\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestLinkSwapRaces$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), linkSwapEnv+"="+lower)
	// Root mapped to itself: the files stay the caller's own, but the
	// namespace has no capability over the host's (no origin decoding).
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags:  unix.CLONE_NEWUSER | unix.CLONE_NEWNS,
		UidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
		GidMappings: []syscall.SysProcIDMap{{ContainerID: 0, HostID: 0, Size: 1}},
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		if bytes.Contains(out, []byte(linkSwapUnavailable)) {
			testreq.Needf(t, testreq.Kernel, "overlayfs in a user namespace", errors.New(strings.TrimSpace(string(out))))
		}
		t.Fatalf("the user-namespace run failed: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("--- PASS: TestLinkSwapRaces")) {
		t.Fatalf("the user-namespace run passed nothing:\n%s", out)
	}
}

// linkSwapUnavailable starts the re-run's message when the kernel cannot
// give it a rootless overlay.
const linkSwapUnavailable = "no rootless overlay:"

// linkSwapRaces is TestLinkSwapRaces in its user namespace.
func linkSwapRaces(t *testing.T, lower string) {
	scratch := t.TempDir()
	if err := unix.Mount("scratch", scratch, "tmpfs", 0, "mode=0700"); err != nil {
		t.Fatalf("%s tmpfs: %v", linkSwapUnavailable, err)
	}
	defer unix.Unmount(scratch, unix.MNT_DETACH)
	upper, work, mnt := filepath.Join(scratch, "u"), filepath.Join(scratch, "w"), filepath.Join(scratch, "m")
	for _, d := range []string{upper, work, mnt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Mount("overlay", mnt, "overlay", 0, "lowerdir="+lower+",upperdir="+upper+",workdir="+work+",userxattr"); err != nil {
		t.Fatalf("%s overlay: %v", linkSwapUnavailable, err)
	}
	defer unix.Unmount(mnt, unix.MNT_DETACH)
	// The premise: here a host file and its link show two identities.
	if err := os.Link(filepath.Join(mnt, "probe"), filepath.Join(mnt, "probe.l")); err != nil {
		t.Fatal(err)
	}
	a, errA := os.Lstat(filepath.Join(mnt, "probe"))
	b, errB := os.Lstat(filepath.Join(mnt, "probe.l"))
	if errA != nil || errB != nil {
		t.Fatal(errA, errB)
	}
	if os.SameFile(a, b) {
		t.Fatalf("%s a link of a lower file shows the source's identity in this user namespace", linkSwapUnavailable)
	}

	r, err := newRenamer(&confinement{landlock: -1, nested: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer r.close()
	// The other thread of the caller: it acts on the step it is given, then
	// lets the swap go on.
	type act struct {
		step string
		do   func() error
	}
	acts := make(chan act, 1)
	r.afterStep = func(step string) {
		select {
		case a := <-acts:
			if a.step != step {
				acts <- a
				return
			}
			if err := a.do(); err != nil {
				t.Errorf("the other thread at %s: %v", step, err)
			}
		default:
		}
	}
	p := &seccomp.Profile{}
	p.Handle("the supervisor links", linkCalls...)
	prog, err := p.Program(true)
	if err != nil {
		t.Fatal(err)
	}
	calls := make(chan [2]string)
	results := make(chan error)
	fdc := make(chan int, 1)
	go func() {
		// Never unlocked: the thread, filtered and without capabilities,
		// ends with the goroutine.
		runtime.LockOSThread()
		var none [2]unix.CapUserData
		if err := unix.Capset(&unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}, &none[0]); err != nil {
			t.Error(err)
			fdc <- -1
			return
		}
		fd, err := seccomp.Install(prog, true)
		if err != nil {
			t.Error(err)
			fdc <- -1
			return
		}
		fdc <- fd
		for c := range calls {
			results <- unix.Linkat(unix.AT_FDCWD, c[0], unix.AT_FDCWD, c[1], 0)
		}
	}()
	fd := <-fdc
	if fd < 0 {
		t.FailNow()
	}
	srv := &seccomp.Server{Profile: p, Handle: r.handle}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() {
		defer close(served)
		srv.Serve(ctx, fd)
	}()
	defer func() {
		close(calls)
		cancel()
		<-served
	}()
	at := func(name string) string { return filepath.Join(mnt, name) }
	link := func(from, to string) {
		t.Helper()
		calls <- [2]string{at(from), at(to)}
		if err := <-results; err != nil {
			t.Fatalf("link %s %s: %v", from, to, err)
		}
		if len(acts) != 0 {
			t.Fatalf("link %s %s: the swap never reached the other thread's step", from, to)
		}
	}
	isMine := func(name string) {
		t.Helper()
		fi, err := os.Lstat(at(name))
		if err != nil || !fi.Mode().IsRegular() {
			t.Errorf("%s: %v, %v; want the linked file", name, fi, err)
			return
		}
		if b, err := os.ReadFile(at(name)); err != nil || string(b) != "mine\n" {
			t.Errorf("%s reads %q, %v", name, b, err)
		}
	}
	isSymlink := func(name, target string) {
		t.Helper()
		if got, err := os.Readlink(at(name)); err != nil || got != target {
			t.Errorf("%s: %q, %v; want the other thread's symlink to %s", name, got, err, target)
		}
	}

	// Without a race the new name takes the source's identity.
	before, err := os.Lstat(at("quiet"))
	if err != nil {
		t.Fatal(err)
	}
	link("quiet", "quiet.l")
	if after, err := os.Lstat(at("quiet.l")); err != nil || !os.SameFile(before, after) {
		t.Errorf("the new name of a quiet link is not the source's identity: %v", err)
	}
	isMine("quiet")

	// The source renamed away while the new name is set aside.
	acts <- act{linkStepKept, func() error { return os.Rename(at("away"), at("away.moved")) }}
	link("away", "away.l")
	isMine("away.l")
	isMine("away.moved")

	// A symlink made at the source's name while it is moved to the new name.
	acts <- act{linkStepMoved, func() error { return os.Symlink("elsewhere", at("taken")) }}
	link("taken", "taken.l")
	isMine("taken.l")
	isSymlink("taken", "elsewhere")

	// The source replaced by a symlink before it is moved: the swap moves
	// the symlink, and must put it back.
	acts <- act{linkStepKept, func() error {
		if err := os.Rename(at("swapped"), at("swapped.moved")); err != nil {
			return err
		}
		return os.Symlink("elsewhere", at("swapped"))
	}}
	link("swapped", "swapped.l")
	isMine("swapped.l")
	isMine("swapped.moved")
	isSymlink("swapped", "elsewhere")

	names, err := os.ReadDir(mnt)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if strings.HasPrefix(n.Name(), ".dryexec-link-") {
			t.Errorf("a temporary name was left: %s", n.Name())
		}
	}
}
