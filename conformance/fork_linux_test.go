package conformance

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/testwait"
	"github.com/dryexec/dryexec/session"
	"github.com/dryexec/dryexec/wire"
)

// forkOf forks s into n branches, closed when t ends.
func forkOf(t *testing.T, s *session.Session, n int) []*session.Session {
	t.Helper()
	bs, err := s.Fork(ctx(t), n)
	if errors.Is(err, session.ErrForkUnsupported) {
		// A rung without forks says so, typed (vm, for now).
		t.Skipf("%s: %v", rungOf(s), err)
	}
	if err != nil {
		t.Fatalf("Fork(%d): %v", n, err)
	}
	if len(bs) != n {
		t.Fatalf("Fork(%d) gave %d branches", n, len(bs))
	}
	for _, b := range bs {
		t.Cleanup(func() { b.Close() })
	}
	return bs
}

func diffOrigin(t *testing.T, s *session.Session) *session.Diff {
	t.Helper()
	d, err := s.DiffOrigin(ctx(t))
	if err != nil {
		t.Fatalf("DiffOrigin: %v", err)
	}
	return d
}

var forkCases = []conformanceCase{
	// A branch starts where the parent stood: its files (pushed and written
	// since), the shell's cwd and exported variables, the cache. Its diff
	// baseline is the fork point; DiffOrigin is against the parent's.
	{"sees_parent_state", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		seed(t, s, tree{"a": file("1\n"), "sub/keep": file("k\n")})
		run(t, s, "echo 2 > b; rm sub/keep; cd sub; export FORKED=yes")
		s.Cache().Set("k", []byte("v"))
		for i, b := range forkOf(t, s, 2) {
			if got := run(t, b, `basename "$PWD"; echo "$FORKED"; cat ../a ../b; ls`); got != "sub\nyes\n1\n2\n" {
				t.Errorf("branch %d: %q, want cwd sub, FORKED=yes, a and b, sub empty", i, got)
			}
			if v, ok := cacheGet(t, b, "k"); !ok || v != "v" {
				t.Errorf("branch %d: cache k = %q %v, want v", i, v, ok)
			}
			checkEmpty(t, getDiff(t, b, false))
			checkDiff(t, diffOrigin(t, b), want{writes: map[string]string{"b": "2\n"}, deletes: []string{"sub/keep"}})
		}
		// The parent runs on, its own baseline unmoved.
		checkDiff(t, getDiff(t, s, false), want{writes: map[string]string{"b": "2\n"}, deletes: []string{"sub/keep"}})
		wantOut(t, s, "pwd >/dev/null; echo $FORKED; echo 3 > c; cat c", "yes\n3\n")
		if _, err := s.DiffOrigin(ctx(t)); !errors.Is(err, session.ErrNoOrigin) {
			t.Errorf("DiffOrigin of a session that is no fork: %v, want ErrNoOrigin", err)
		}
	}},
	// What one branch writes, deletes or chmods no one else sees: not the
	// parent, not a sibling; and what the parent does after the fork no
	// branch sees.
	{"writes_isolated", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		seed(t, s, tree{"a": file("a\n"), "d/x": file("x\n")})
		run(t, s, "echo up > u")
		bs := forkOf(t, s, 2)
		run(t, bs[0], "echo 0 > n; rm a; chmod 755 u; rm -r d")
		run(t, bs[1], "echo 1 > n; echo changed > u")
		run(t, s, "echo p > p; rm d/x")
		wantOut(t, s, "cat a u; ls", "a\nup\na\nd\np\nu\n")
		wantOut(t, bs[0], "ls; cat u; stat -c %a u", "n\nu\nup\n755\n")
		wantOut(t, bs[1], "ls; cat n u d/x", "a\nd\nn\nu\n1\nchanged\nx\n")
		checkDiff(t, getDiff(t, bs[0], false), want{writes: map[string]string{"n": "0\n"}, deletes: []string{"a", "d/x"},
			modes: map[string]fs.FileMode{"u": 0o755}})
		checkDiff(t, getDiff(t, bs[1], false), want{writes: map[string]string{"n": "1\n", "u": "changed\n"}})
		checkDiff(t, getDiff(t, s, false), want{writes: map[string]string{"u": "up\n", "p": "p\n"}, deletes: []string{"d/x"}})
		// Reset takes a branch back to the fork point, not the parent's
		// baseline.
		if err := bs[1].Reset(ctx(t)); err != nil {
			t.Fatal(err)
		}
		wantOut(t, bs[1], "cat u", "up\n")
	}},
	// Keep makes one branch's changes the parent's and ends every branch of
	// that fork: no guest, exec process or mount of theirs is left.
	{"keep_leaves_nothing", func(t *testing.T, open opener) {
		before := mountSnapshot(t)
		started := make(chan string, 8)
		s := open(t, session.Options{OnEmit: func(e wire.Emit) { started <- e.Name }})
		ws := s.Info().Workspace
		seed(t, s, tree{"a": file("a\n"), "gone": file("g\n")})
		parentGuest := onlyGuest(t)
		bs := forkOf(t, s, 3)
		for i, b := range bs {
			run(t, b, fmt.Sprintf("echo %d > n", i))
		}
		run(t, bs[1], "rm gone; ln -s a l; chmod 700 a")
		bs[1].Cache().Set("won", []byte("1"))
		// The other branches are mid-exec when keep discards them. A gvisor
		// sandbox's or a VM's processes are not the host's: there the execs
		// say they run by an emit (a branch's events go to its parent's
		// OnEmit), and what ends with them is each branch's runsc or QEMU.
		marker := uniqueSleep()
		gvisor := rungOf(s) == "gvisor" || rungOf(s) == "vm"
		for i, b := range []*session.Session{bs[0], bs[2]} {
			if gvisor {
				go b.Python(ctx(t), fmt.Sprintf("emit('running%d', 1)\nimport time\ntime.sleep(1000)", i), nil, 0)
				continue
			}
			go b.Shell(ctx(t), marker+" & "+marker, 0)
		}
		if gvisor {
			for range 2 {
				<-started
			}
		} else {
			waitRunning(t, marker, 4)
		}
		if err := s.Keep(ctx(t), bs[1]); err != nil {
			t.Fatalf("Keep: %v", err)
		}
		if !bs[1].Kept() || bs[0].Kept() {
			t.Errorf("Kept: %v %v, want the second only", bs[0].Kept(), bs[1].Kept())
		}
		wantOut(t, s, "cat n; ls; readlink l; stat -c %a a", "1\na\nl\nn\na\n700\n")
		if v, ok := cacheGet(t, s, "won"); !ok || v != "1" {
			t.Errorf("the kept branch's cache: won = %q %v", v, ok)
		}
		checkDiff(t, getDiff(t, s, false), want{writes: map[string]string{"n": "1\n"}, links: map[string]string{"l": "a"},
			deletes: []string{"gone"}, modes: map[string]fs.FileMode{"a": 0o700}})
		if pids := forkGuests(t, s); !slices.Equal(pids, []int{parentGuest}) {
			t.Errorf("guests after keep: %v, want only the parent's %d", pids, parentGuest)
		}
		if left := waitNoProcess(marker); len(left) > 0 {
			t.Errorf("the branches' processes outlived keep: %v", left)
		}
		for _, b := range bs {
			if _, err := b.Shell(ctx(t), "true", 0); err == nil {
				t.Errorf("a branch still runs after keep")
			}
		}
		if err := s.Keep(ctx(t), bs[0]); !errors.Is(err, session.ErrNotBranch) {
			t.Errorf("Keep of a discarded branch: %v, want ErrNotBranch", err)
		}
		if m := sessionMounts(before, mountSnapshot(t), ws); len(m) > 0 {
			t.Errorf("mounts on the host: %q", m)
		}
		s.Close()
		// The family's sessions opened ahead go with its last session.
		if pids := guestPIDs(t); len(pids) != 0 {
			t.Errorf("guests after Close: %v", pids)
		}
	}},
	// Discard ends a branch alone; closing the parent leaves a branch
	// working (on ns it holds the layers it needs).
	{"discard_and_outlive_parent", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		seed(t, s, tree{"a": file("a\n")})
		run(t, s, "echo w > w")
		bs := forkOf(t, s, 2)
		if err := s.Discard(bs[0]); err != nil {
			t.Fatal(err)
		}
		if err := bs[1].Discard(bs[0]); !errors.Is(err, session.ErrNotBranch) {
			t.Errorf("Discard by a sibling: %v, want ErrNotBranch", err)
		}
		s.Close()
		wantOut(t, bs[1], "cat a w; echo more >> w; cat w", "a\nw\nw\nmore\n")
		if pids := forkGuests(t, bs[1]); len(pids) != 1 {
			t.Errorf("guests: %v, want the one branch", pids)
		}
	}},
	// ns: a process holding a workspace file open for writing could write
	// on into the layer the branches share, so the fork is refused (typed,
	// the session unchanged) until it ends; one merely running there is
	// stopped for the instant and continued.
	{"busy_writer_refused", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		if rungOf(s) != "ns" {
			t.Skip("the host and gvisor rungs copy the tree: no layer is shared, nothing is refused")
		}
		run(t, s, "setsid sh -c 'echo $$ > /tmp/w.pid; exec 3>w.log; echo x >&3; while :; do sleep 1 3>&-; done' >/dev/null 2>&1 & setsid sh -c 'while :; do sleep 1; done' >/dev/null 2>&1 & until [ -s w.log ]; do :; done")
		if _, err := s.Fork(ctx(t), 1); !errors.Is(err, session.ErrForkBusy) {
			t.Fatalf("Fork with a writer: %v, want ErrForkBusy", err)
		}
		wantOut(t, s, "cat w.log; echo y > after; cat after", "x\ny\n")
		run(t, s, "p=$(cat /tmp/w.pid); kill $p; while [ -e /proc/$p ] && ! grep -q ') Z' /proc/$p/stat; do :; done")
		b := forkOf(t, s, 1)[0]
		wantOut(t, b, "cat w.log after", "x\ny\n")
		// The other background loop was continued: it is not stopped.
		if got := run(t, s, "ps -o stat= -C sh | grep -c T || true"); got != "0\n" {
			t.Errorf("stopped processes after the fork: %q", got)
		}
		if rungOf(s) != "gvisor" {
			return // ns refuses a fork while a file is open for writing
		}
		// gvisor copies the trees, a after m/ and b after a: a writer not
		// stopped for the copy would have moved b on past a by the time b is
		// copied. Stopped, b is a or one behind.
		run(t, s, "mkdir m; for i in $(seq 300); do echo $i > m/$i; done; setsid sh -c 'i=0; while :; do i=$((i+1)); echo $i > a.t; mv a.t a; echo $i > b.t; mv b.t b; done' >/dev/null 2>&1 & until [ -s b ]; do :; done")
		for range 2 {
			b := forkOf(t, s, 1)[0]
			if got := run(t, b, `a=$(cat a) b=$(cat b); [ "$b" -le "$a" ] && echo ok || echo "a=$a b=$b"`); got != "ok\n" {
				t.Errorf("the branch's a and b, written one after the other by a process running at the fork: %s", got)
			}
			b.Close()
		}
	}},
	// A process left running in the session is stopped for the instant of
	// the fork (ns: the freeze; gvisor: the trees' copy) and continued
	// after; what it wrote before is the branch's.
	{"background_continued", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		if rungOf(s) == "host" {
			t.Skip("the host rung stops nothing")
		}
		run(t, s, "setsid sh -c 'echo $$ > bg.pid; echo started > bg.log; while :; do sleep 1; done' >/dev/null 2>&1 & until [ -s bg.log ]; do :; done")
		if rungOf(s) == "vm" {
			// A vm fork snapshots the VM, which needs the view let go of:
			// a process left running holds it, so the fork is refused
			// and the parent goes on as it was, its process running.
			if _, err := s.Fork(ctx(t), 1); err == nil || !strings.Contains(err.Error(), "still runs") {
				t.Fatalf("Fork with a process left running: %v, want a refusal naming it", err)
			}
			wantOut(t, s, "cat bg.log; echo y > after; cat after; ps -o stat= -C sh | grep -c T || true", "started\ny\n0\n")
			run(t, s, "p=$(cat bg.pid); kill -- -$p; while ps -o stat= -s $p | grep -qv '^Z'; do :; done")
			wantOut(t, forkOf(t, s, 1)[0], "cat bg.log after", "started\ny\n")
			return
		}
		b := forkOf(t, s, 1)[0]
		wantOut(t, b, "cat bg.log", "started\n")
		if got := run(t, s, "ps -o stat= -C sh | grep -c T || true"); got != "0\n" {
			t.Errorf("stopped processes after the fork: %q", got)
		}
		if rungOf(s) != "gvisor" {
			return // ns refuses a fork while a file is open for writing
		}
		// gvisor copies the trees: a file growing during the copy would
		// be torn (or fail the copy) were the writer not stopped.
		run(t, s, "setsid sh -c 'while :; do echo 0123456789 >> grow; done' >/dev/null 2>&1 & until [ -s grow ]; do :; done")
		for range 3 {
			b := forkOf(t, s, 1)[0]
			if got := run(t, b, "grep -cv '^0123456789$' grow || true"); got != "0\n" {
				t.Errorf("the branch's copy of a file growing at the fork has %s torn lines", strings.TrimSpace(got))
			}
			b.Close()
		}
	}},
	// Each branch has its own network (netsim) and its log: what one
	// branch tries is in its log alone.
	{"own_network_log", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		if rungOf(s) == "host" {
			t.Skip("the host rung has no network of its own")
		}
		bs := forkOf(t, s, 2)
		run(t, bs[0], `python3 -c "
import socket
s = socket.socket()
s.settimeout(10)
try:
    s.connect(('192.0.2.7', 8080))
except OSError:
    pass"`)
		tried := func(x *session.Session) bool {
			return slices.ContainsFunc(x.Network(), func(e dryexec.NetworkEvent) bool { return e.Port == 8080 })
		}
		if !tried(bs[0]) {
			t.Errorf("the branch's network log lacks its attempt: %+v", bs[0].Network())
		}
		if tried(s) || tried(bs[1]) {
			t.Errorf("another's attempt in the parent's or the sibling's log: %+v, %+v", s.Network(), bs[1].Network())
		}
	}},
	// Forks of forks, and many forks of one session: each level sees every
	// level above, the stacks stay mountable (the ns rung flattens them)
	// and the diffs stay right.
	{"repeated_forks", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		seed(t, s, tree{"base": file("b\n")})
		const depth = 12
		cur := s
		for i := range depth {
			run(t, cur, fmt.Sprintf("echo %d > f%d; rm -f f%d", i, i, i-2))
			b := forkOf(t, cur, 1)[0]
			if i > 0 && cur != s {
				cur.Close() // a middle generation may go: its child holds what it needs
			}
			cur = b
		}
		var wantLs strings.Builder
		wantLs.WriteString("base\n")
		for _, i := range []int{depth - 2, depth - 1} {
			fmt.Fprintf(&wantLs, "f%d\n", i)
		}
		wantOut(t, cur, "ls | sort -V", wantLs.String())
		if rungOf(cur) == "ns" {
			// Every guest's workspace overlay stays shallow: flattened
			// past 8 frozen layers (the base, and the boundaries, apart).
			for _, pid := range guestPIDs(t) {
				if n := workspaceLowers(t, pid, cur.Info().Workspace); n > 12 {
					t.Errorf("guest %d: the workspace has %d lower layers after %d forks of forks", pid, n, depth)
				}
			}
		}
		checkEmpty(t, getDiff(t, cur, false))
		run(t, cur, fmt.Sprintf("echo last > f%d", depth-1))
		checkDiff(t, getDiff(t, cur, false), want{writes: map[string]string{fmt.Sprintf("f%d", depth-1): "last\n"}})
		// The origin is the parent's baseline, its own fork point: f9 was
		// there, and it removed it since.
		checkDiff(t, diffOrigin(t, cur), want{writes: map[string]string{fmt.Sprintf("f%d", depth-1): "last\n"}, deletes: []string{fmt.Sprintf("f%d", depth-3)}})
		// One session forked many times: its own stack grows by one a fork.
		for i := range depth {
			run(t, s, fmt.Sprintf("echo %d > g%d", i, i))
			b := forkOf(t, s, 1)[0]
			if i == depth-1 {
				wantOut(t, b, fmt.Sprintf("cat g0 g%d", depth-1), fmt.Sprintf("0\n%d\n", depth-1))
			}
			b.Close()
		}
		d := getDiff(t, s, false)
		if len(d.Writes) != depth+1 { // f0 (written in s before its first fork), g0…
			t.Errorf("parent's diff after %d forks: %d writes, want %d: %v", depth, len(d.Writes), depth+1, d.Paths())
		}
		if err := s.Reset(ctx(t)); err != nil {
			t.Fatal(err)
		}
		wantOut(t, s, "ls", "base\n")
	}},
	// A chain of forks of forks deeper than any overlay can stack (the
	// page of mount options holds about 150 of the ns rung's layer
	// paths): each branch adopts its parent's stack and freezes one more
	// layer, so without the background merge the chain fails to mount
	// long before its end. Every level sees every level above.
	{"deep_chain", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		depth := 12 // the host and gvisor rungs copy the tree: there is no stack
		if rungOf(s) == "ns" {
			depth = 170
			if v := os.Getenv("ZZDEPTH"); v != "" {
				fmt.Sscan(v, &depth)
			}
		}
		seed(t, s, tree{"base": file("b\n")})
		cur := s
		for i := range depth {
			run(t, cur, fmt.Sprintf("echo %d > f%d; rm -f f%d", i, i, i-2))
			b := forkOf(t, cur, 1)[0]
			if cur != s {
				cur.Close()
			}
			cur = b
			if os.Getenv("ZZDEPTH") != "" {
				d := getDiff(t, cur, false)
				t.Logf("level %d: diff %v lowers %v", i, d.Paths(), workspaceLowers(t, forkGuests(t, cur)[len(forkGuests(t, cur))-1], cur.Info().Workspace))
			}
		}
		wantOut(t, cur, "ls | sort -V; cat base", fmt.Sprintf("base\nf%d\nf%d\nb\n", depth-2, depth-1))
		run(t, cur, "echo top > top")
		checkDiff(t, getDiff(t, cur, false), want{writes: map[string]string{"top": "top\n"}})
		// The origin is the parent's fork point: since then it wrote the
		// last level's file and removed the one three levels up.
		checkDiff(t, diffOrigin(t, cur), want{writes: map[string]string{"top": "top\n", fmt.Sprintf("f%d", depth-1): fmt.Sprintf("%d\n", depth-1)},
			deletes: []string{fmt.Sprintf("f%d", depth-3)}})
		if rungOf(s) == "ns" {
			for _, pid := range forkGuests(t, cur) {
				if n := workspaceLowers(t, pid, cur.Info().Workspace); n > 33 {
					t.Errorf("guest %d: %d lower layers after a chain of %d forks", pid, n, depth)
				}
			}
		}
	}},
	// ns: past 8 layers the stack is merged in the background, and the
	// workspace takes the merged stack at a later request, while a
	// process of the session runs in it and a branch forked before still
	// uses the old layers: both go on seeing the right files, and keep
	// takes that branch's changes into the merged workspace.
	{"flatten_mid_use", func(t *testing.T, open opener) {
		s := openDefault(t, open)
		if rungOf(s) != "ns" {
			t.Skip("the host and gvisor rungs copy the tree; there are no layers to merge")
		}
		seed(t, s, tree{"sub/a": file("a\n"), "gone": file("g\n")})
		marker := uniqueSleep()
		// A reader started before the merge, its cwd in the workspace. The
		// exec waits until it has its own session: what is still in the
		// exec's process group when the shell ends goes with it.
		run(t, s, "rm -f /tmp/reader.up; cd sub && setsid sh -c ': > /tmp/reader.up; exec "+marker+"' >/dev/null 2>&1 & until [ -e /tmp/reader.up ]; do :; done")
		pid := waitRunning(t, marker, 1)[0]
		var early *session.Session
		for i := range 12 {
			run(t, s, fmt.Sprintf("echo %d > g%d", i, i))
			b := forkOf(t, s, 1)[0]
			if i == 0 {
				early = b
				continue
			}
			b.Close()
		}
		run(t, s, "rm gone")
		testwait.For(t, time.Minute, "the parent's stack merged", func() bool {
			run(t, s, "true") // a request: the merge lands at one
			return workspaceLowers(t, s.GuestPID(), s.Info().Workspace) <= 8
		})
		wantOut(t, s, "ls | sort -V; cat sub/a g11", "g0\ng1\ng2\ng3\ng4\ng5\ng6\ng7\ng8\ng9\ng10\ng11\nsub\na\n11\n")
		// The process inside kept its view (the old mount): its cwd
		// still shows the file.
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cwd/a", pid)); err != nil || string(b) != "a\n" {
			t.Errorf("the running process's cwd/a after the merge: %q %v", b, err)
		}
		wantOut(t, early, "ls | sort -V", "g0\ngone\nsub\n")
		run(t, early, "echo e > e; rm g0")
		if err := s.Keep(ctx(t), early); err != nil {
			t.Fatalf("Keep: %v", err)
		}
		wantOut(t, s, "ls | sort -V; cat e", "e\ng1\ng2\ng3\ng4\ng5\ng6\ng7\ng8\ng9\ng10\ng11\nsub\ne\n")
		writes := map[string]string{"e": "e\n"}
		for i := 1; i < 12; i++ {
			writes[fmt.Sprintf("g%d", i)] = fmt.Sprintf("%d\n", i)
		}
		checkDiff(t, getDiff(t, s, false), want{writes: writes, deletes: []string{"gone"}})
		b := forkOf(t, s, 1)[0]
		wantOut(t, b, "cat e g11 sub/a", "e\n11\na\n")
	}},
}

// forkGuests are the session guests running now but those a fork family
// of s keeps opened ahead of its forks (ns): those have adopted nothing, so
// their workspace is their own base alone (one lower, or none yet while
// one starts), where a session that forked, and a branch, have a stack.
func forkGuests(t *testing.T, s *session.Session) []int {
	t.Helper()
	pids := guestPIDs(t)
	if rungOf(s) != "ns" {
		return pids
	}
	return slices.DeleteFunc(pids, func(pid int) bool { return workspaceLowers(t, pid, s.Info().Workspace) <= 1 })
}

// workspaceLowers counts the lower layers of the overlay guest pid has at ws
// (0: none found).
func workspaceLowers(t *testing.T, pid int, ws string) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, syscall.ESRCH) {
		return 0 // gone since it was listed
	}
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		i := slices.Index(f, "-")
		if len(f) < 5 || f[4] != ws || i < 0 || i+3 >= len(f) || f[i+1] != "overlay" {
			continue
		}
		for _, o := range strings.Split(f[i+3], ",") {
			if v, ok := strings.CutPrefix(o, "lowerdir="); ok {
				n = strings.Count(v, ":") + 1
			}
		}
	}
	return n
}
