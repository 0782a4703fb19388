package fault_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/testreq"
	"github.com/dryexec/dryexec/internal/testwait"
	"github.com/dryexec/dryexec/rung/linuxns"
	"github.com/dryexec/dryexec/server"
	"github.com/dryexec/dryexec/test/soak/harness"
)

func TestMain(m *testing.M) { harness.Main(m) }

// fixture is one fault case's world: a store, a private TMPDIR, the host's
// baseline, the daemons started so far, and a trial stored before the fault
// that must come through it unharmed.
type fixture struct {
	t      *testing.T
	root   string
	env    harness.Env
	base   harness.Baseline
	owners []int // every daemon or CLI pid of this case (their cgroups count)
	// bystander is a pending trial recorded before the fault: it must still
	// load and commit afterwards.
	bystander   string
	bystanderWD string
}

func setup(t *testing.T) *fixture {
	t.Helper()
	testreq.NeedRoot(t)
	testreq.Need(t, testreq.NS, (&linuxns.Rung{}).Available(context.Background()))
	root := t.TempDir()
	return &fixture{t: t, root: root}
}

// begin makes the env (after any mount the case needs under root) and takes
// the baseline.
func (f *fixture) begin() {
	f.env = harness.NewEnv(f.t, f.root)
	f.base = harness.TakeBaseline()
}

func (f *fixture) start() *harness.Daemon {
	f.t.Helper()
	d := harness.Start(f.t, f.env, filepath.Join(f.root, "d.sock"))
	f.owners = append(f.owners, d.Pid)
	return d
}

func (f *fixture) dir(name string) string {
	f.t.Helper()
	p := filepath.Join(f.root, name)
	if err := os.MkdirAll(p, 0o755); err != nil {
		f.t.Fatal(err)
	}
	return p
}

func (f *fixture) req(cwd, script string) server.TrialRequest {
	return server.TrialRequest{Argv: []string{"/bin/sh", "-c", script}, Cwd: cwd, Env: map[string]string{harness.MarkEnv: f.env.Mark}}
}

// recordBystander stores a pending trial through d before the fault.
func (f *fixture) recordBystander(d *harness.Daemon) {
	f.t.Helper()
	f.bystanderWD = f.dir("bystander")
	var delta dryexec.StateDelta
	if err := d.Do(context.Background(), "POST", "/v1/trials", f.req(f.bystanderWD, "echo kept > kept.txt"), &delta); err != nil {
		f.t.Fatal(err)
	}
	f.bystander = delta.TrialID
}

// checkBystander: the trial recorded before the fault loads, is pending, and
// commits.
func (f *fixture) checkBystander(d *harness.Daemon) {
	f.t.Helper()
	ctx := context.Background()
	var delta dryexec.StateDelta
	if err := d.Do(ctx, "GET", "/v1/trials/"+f.bystander, nil, &delta); err != nil || len(delta.Files) != 1 {
		f.t.Fatalf("the trial stored before the fault: %v %+v", err, delta.Files)
	}
	if err := d.Do(ctx, "POST", "/v1/trials/"+f.bystander+"/commit", server.CommitRequest{}, nil); err != nil {
		f.t.Fatalf("committing the trial stored before the fault: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(f.bystanderWD, "kept.txt")); err != nil || string(b) != "kept\n" {
		f.t.Fatalf("the committed bystander: %q %v", b, err)
	}
}

// noLeaks asserts that nothing of this case is left on the host but what the
// running daemons (live) hold themselves (their warm pools), and no
// half-recorded trial in the store.
func (f *fixture) noLeaks(live ...int) {
	f.t.Helper()
	left := harness.WaitGone(10*time.Second, func() []string {
		l := f.env.Leaks(f.base, f.root, f.owners, live...)
		if l.Empty() {
			return nil
		}
		return []string{l.String()}
	})
	if len(left) > 0 {
		f.t.Errorf("left on the host:\n%s", left[0])
	}
	if p, _ := filepath.Glob(filepath.Join(f.env.Home, "trials", "*.partial")); len(p) > 0 {
		f.t.Errorf("half-recorded trials left in the store: %v", p)
	}
}

// finish stops the last daemon (it drains) and asserts that nothing at all
// is left: its own sandboxes go with it.
func (f *fixture) finish(d *harness.Daemon) {
	f.t.Helper()
	if err := d.Stop(time.Minute); err != nil {
		f.t.Fatal(err)
	}
	f.noLeaks()
}

// waitMarked waits until a process of this case whose command line starts
// with what is running.
func (f *fixture) waitMarked(what string) {
	f.t.Helper()
	testwait.For(f.t, time.Minute, fmt.Sprintf("a process %q", what), func() bool {
		return slices.ContainsFunc(harness.Marked(f.env.Mark), func(p string) bool { return strings.Contains(p, ": "+what) })
	})
}

// SIGKILL of the daemon while a trial runs: the sandbox dies with it, and the
// next start removes the half-recorded trial and the trial's cgroup.
func TestKillDaemonMidTrial(t *testing.T) {
	f := setup(t)
	f.begin()
	d := f.start()
	f.recordBystander(d)
	wd := f.dir("wd")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ev, err := d.Stream(ctx, f.req(wd, "echo x > f; (setsid sleep 600 &); echo started; sleep 600"))
	if err != nil {
		t.Fatal(err)
	}
	for e := range ev {
		if e["event"] == "stdout" {
			break
		}
	}
	f.waitMarked("sleep 600")
	// The store writes nothing of a trial until it has something to keep,
	// so a kill mid-run leaves no record; one killed while recording leaves
	// a .partial whose lock nobody holds, planted here.
	plantPartial(t, f.env.Home)
	d.Kill()
	if left := harness.WaitGone(10*time.Second, func() []string { return harness.Marked(f.env.Mark) }); len(left) > 0 {
		t.Fatalf("the sandbox outlived its SIGKILLed daemon: %v", left)
	}
	t.Logf("left by the kill, for the next start to clean: %s", f.env.Leaks(f.base, f.root, f.owners))
	d2 := f.start()
	f.noLeaks(d2.Pid)
	f.checkBystander(d2)
	if _, err := os.Stat(filepath.Join(wd, "f")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("the killed trial changed the host")
	}
	f.finish(d2)
}

// SIGKILL of the daemon while a session's exec runs (an ns and a host-rung
// session): sandboxes and the host session's temp dir are gone after the next
// start, and the sessions with them.
func TestKillDaemonMidSessionExec(t *testing.T) {
	f := setup(t)
	f.begin()
	d := f.start()
	f.recordBystander(d)
	ctx := context.Background()
	for r, sleep := range map[string]string{"ns": "sleep 601", "host": "sleep 602"} {
		var info server.SessionInfo
		if err := d.Do(ctx, "POST", "/v1/sessions", server.SessionRequest{Rung: r, Env: map[string]string{harness.MarkEnv: f.env.Mark}}, &info); err != nil {
			t.Fatal(err)
		}
		go d.Do(ctx, "POST", "/v1/sessions/"+info.SessionID+"/shell", map[string]any{"command": "echo x > w; " + sleep}, nil)
		f.waitMarked(sleep)
	}
	if ents, _ := os.ReadDir(f.env.TmpDir); len(ents) == 0 {
		t.Fatal("expected the host session's temp dir in the daemon's TMPDIR")
	}
	d.Kill()
	t.Logf("left by the kill, for the next start to clean: %s", f.env.Leaks(f.base, f.root, f.owners))
	d2 := f.start()
	f.noLeaks(d2.Pid)
	var list struct {
		Sessions []server.SessionInfo `json:"sessions"`
	}
	if err := d2.Do(ctx, "GET", "/v1/sessions", nil, &list); err != nil || len(list.Sessions) != 0 {
		t.Fatalf("sessions after the restart: %v %+v", err, list.Sessions)
	}
	f.checkBystander(d2)
	f.finish(d2)
}

// SIGKILL of `dryexec run` while its trial runs: the next dryexec command (here
// `dryexec ls`) removes the half-recorded trial and the cgroup.
func TestKillCLIMidTrial(t *testing.T) {
	f := setup(t)
	f.begin()
	d := f.start()
	f.recordBystander(d)
	if err := d.Stop(time.Minute); err != nil {
		t.Fatal(err)
	}
	wd := f.dir("wd")
	cmd := f.env.Command("run", "--env", harness.MarkEnv, "--", "sh", "-c", "echo x > f; (setsid sleep 600 &); sleep 600")
	cmd.Dir = wd
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	f.owners = append(f.owners, cmd.Process.Pid)
	f.waitMarked("sleep 600")
	plantPartial(t, f.env.Home) // as in TestKillDaemonMidTrial
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	if left := harness.WaitGone(10*time.Second, func() []string { return harness.Marked(f.env.Mark) }); len(left) > 0 {
		t.Fatalf("the sandbox outlived its SIGKILLed CLI: %v", left)
	}
	t.Logf("left by the kill, for the next start to clean: %s", f.env.Leaks(f.base, f.root, f.owners))
	ls := f.env.Command("ls")
	out, err := ls.CombinedOutput()
	if err != nil || !strings.Contains(string(out), f.bystander) {
		t.Fatalf("dryexec ls after the kill: %v\n%s", err, out)
	}
	f.owners = append(f.owners, ls.Process.Pid)
	f.noLeaks()
	d2 := f.start()
	f.checkBystander(d2)
	f.finish(d2)
}

// Kill points of a commit, named by the journal state the test waits for
// before the SIGKILL (commit/journal_linux.go): "planned" is written before
// anything is staged, "staged" once every new content is beside its target and
// the renames begin, "applied" once every rename is done and the backups and
// swapped-out contents are being deleted (recovery finishes, not undoes).
var killPoints = []string{"planned", "staged", "applied"}

// SIGKILL of the daemon mid-commit: after the next start (which runs the
// journal's recovery) the host is either fully as before the commit (and the
// trial still pending, committable) or fully as the trial left it (and the
// trial committed); no temp or backup file is left.
func TestKillDaemonMidCommit(t *testing.T) {
	for _, point := range killPoints {
		t.Run(point, func(t *testing.T) {
			f := setup(t)
			f.begin()
			d := f.start()
			f.recordBystander(d)
			wd := f.dir("wd")
			// Many new files make staging long (the "planned" window), many
			// modified ones make the renames and the finish long (the old
			// contents, swapped out, are deleted after "applied").
			const dirs, per, mods, dels = 20, 75, 1500, 10
			if err := os.Mkdir(filepath.Join(wd, "mod"), 0o755); err != nil {
				t.Fatal(err)
			}
			for k := range mods {
				os.WriteFile(filepath.Join(wd, "mod", strconv.Itoa(k)), []byte(fmt.Sprintf("old %d\n", k)), 0o644)
			}
			for k := range dels {
				os.WriteFile(filepath.Join(wd, fmt.Sprintf("del_%d", k)), []byte("doomed\n"), 0o644)
			}
			before := tree(t, wd)
			script := fmt.Sprintf(`set -e; mkdir new; for d in $(seq 0 %d); do mkdir new/$d; for i in $(seq 0 %d); do echo "$d-$i" > new/$d/$i; done; done
for k in $(seq 0 %d); do echo "new $k" > mod/$k; done; for k in $(seq 0 %d); do rm del_$k; done`, dirs-1, per-1, mods-1, dels-1)
			var delta dryexec.StateDelta
			ctx := context.Background()
			if err := d.Do(ctx, "POST", "/v1/trials", f.req(wd, script), &delta); err != nil {
				t.Fatal(err)
			}
			if want := 1 + dirs + dirs*per + mods + dels; len(delta.Files) != want {
				t.Fatalf("trial: %d changes, want %d; %+v", len(delta.Files), want, delta.Process)
			}
			after := maps(before)
			after["new"] = "dir"
			for dd := range dirs {
				after[fmt.Sprintf("new/%d", dd)] = "dir"
				for i := range per {
					after[fmt.Sprintf("new/%d/%d", dd, i)] = fmt.Sprintf("file %d-%d\n", dd, i)
				}
			}
			for k := range mods {
				after["mod/"+strconv.Itoa(k)] = fmt.Sprintf("file new %d\n", k)
			}
			for k := range dels {
				delete(after, fmt.Sprintf("del_%d", k))
			}

			journal := filepath.Join(f.env.Home, "journal", delta.TrialID+".json")
			commitDone := make(chan error, 1)
			go func() {
				commitDone <- d.Do(ctx, "POST", "/v1/trials/"+delta.TrialID+"/commit", server.CommitRequest{}, nil)
			}()
			seen := waitJournal(t, journal, point, commitDone)
			d.Kill()
			<-commitDone
			mid := tree(t, wd)
			t.Logf("killed with the journal %q; before recovery %d of %d paths are as the trial left them", seen, same(mid, after), len(after))

			d2 := f.start()
			host := tree(t, wd)
			if err := d2.Do(ctx, "GET", "/v1/trials/"+delta.TrialID, nil, nil); err != nil {
				t.Fatal(err)
			}
			status := trialStatus(t, f.env.Home, delta.TrialID)
			switch {
			case equal(host, before):
				if status != "pending" {
					t.Fatalf("the host is as before the commit but the trial is %q", status)
				}
				t.Logf("recovery rolled the commit back")
				if err := d2.Do(ctx, "POST", "/v1/trials/"+delta.TrialID+"/commit", server.CommitRequest{}, nil); err != nil {
					t.Fatalf("committing again after the rollback: %v", err)
				}
				if h := tree(t, wd); !equal(h, after) {
					t.Fatalf("the second commit left the host neither old nor new: %s", diffTrees(h, after))
				}
			case equal(host, after):
				if status != "committed" {
					t.Fatalf("the host is as the trial left it but the trial is %q", status)
				}
				t.Logf("recovery finished the commit")
			default:
				t.Fatalf("half-applied commit after recovery: vs before: %s; vs after: %s", diffTrees(host, before), diffTrees(host, after))
			}
			if _, err := os.Stat(journal); !errors.Is(err, fs.ErrNotExist) {
				t.Fatalf("the journal is left after recovery: %v", err)
			}
			f.checkBystander(d2)
			f.finish(d2)
		})
	}
}

// waitJournal polls the commit's journal until it is in state want (or a
// later one) and returns the state seen. The commit must not finish first.
func waitJournal(t *testing.T, path, want string, done <-chan error) string {
	t.Helper()
	order := []string{"planned", "staged", "applied"}
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			t.Fatalf("the commit finished (%v) before the journal reached %q: make it bigger", err, want)
		default:
		}
		if b, err := os.ReadFile(path); err == nil {
			var j struct {
				State string `json:"state"`
			}
			if json.Unmarshal(b, &j) == nil && slices.Index(order, j.State) >= slices.Index(order, want) {
				return j.State
			}
		}
		time.Sleep(500 * time.Microsecond)
	}
	t.Fatalf("the journal never reached %q", want)
	return ""
}

func trialStatus(t *testing.T, home, id string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(home, "trials", id, "state.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return "pending"
	}
	var st struct {
		Status string `json:"status"`
	}
	if err != nil || json.Unmarshal(b, &st) != nil {
		t.Fatalf("state of %s: %v %s", id, err, b)
	}
	return st.Status
}

// tree maps every path under dir to "dir", "file CONTENT" or "link TARGET".
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, e fs.DirEntry, err error) error {
		if err != nil || p == dir {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		switch {
		case e.IsDir():
			out[rel] = "dir"
		case e.Type()&fs.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			out[rel] = "link " + l
		default:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = "file " + string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func maps(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func equal(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func same(a, b map[string]string) int {
	n := 0
	for k, v := range b {
		if a[k] == v {
			n++
		}
	}
	return n
}

// diffTrees says (briefly) how got differs from want.
func diffTrees(got, want map[string]string) string {
	var extra, missing, changed []string
	for k, v := range got {
		if w, ok := want[k]; !ok {
			extra = append(extra, k)
		} else if w != v {
			changed = append(changed, k)
		}
	}
	for k := range want {
		if _, ok := got[k]; !ok {
			missing = append(missing, k)
		}
	}
	short := func(s []string) string {
		slices.Sort(s)
		if len(s) > 5 {
			return fmt.Sprintf("%v… (%d)", s[:5], len(s))
		}
		return fmt.Sprint(s)
	}
	return fmt.Sprintf("extra %s, missing %s, changed %s", short(extra), short(missing), short(changed))
}

// The state directory's filesystem fills up (a small tmpfs as
// $DRYEXEC_HOME): a trial that cannot be recorded fails with a message that
// says so and leaves nothing half-recorded; a commit that cannot journal
// changes nothing on the host; other trials are unharmed; once there is space
// again everything works, across a restart too.
func TestStateDirFull(t *testing.T) {
	// No free-space floor: this case is about the disk really running out
	// (ENOSPC), not about the floor that keeps a store from getting there,
	// which a 16 MiB tmpfs is always below.
	t.Setenv("DRYEXEC_STORE_MIN_FREE", "-1")
	f := setup(t)
	home := filepath.Join(f.root, "home")
	if err := os.MkdirAll(home, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", home, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "size=16m,mode=0700"); err != nil {
		testreq.Needf(t, testreq.Kernel, "tmpfs mount", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(home, unix.MNT_DETACH); err != nil {
			t.Errorf("unmounting the test's tmpfs: %v", err)
		}
	})
	f.begin()
	d := f.start()
	f.recordBystander(d)
	ctx := context.Background()
	wd := f.dir("wd")
	// A pending trial to commit while the disk is full.
	var pend dryexec.StateDelta
	if err := d.Do(ctx, "POST", "/v1/trials", f.req(wd, "echo later > later.txt"), &pend); err != nil {
		t.Fatal(err)
	}
	filler := filepath.Join(home, "filler")
	fill(t, filler)

	// A trial whose content cannot be stored.
	err := d.Do(ctx, "POST", "/v1/trials", f.req(wd, "head -c 1000000 /dev/zero > big"), nil)
	var ae *harness.APIError
	if !errors.As(err, &ae) || ae.Code != "no_space" || !strings.Contains(ae.Message, "no space left on device") {
		t.Fatalf("a trial on a full state dir: %v, want code no_space saying there is no space", err)
	}
	if strings.Contains(ae.Message, "guest") {
		t.Errorf("the host's full store is blamed on the guest: %s", ae.Message)
	}
	t.Logf("trial on a full disk: %v", err)
	// A commit that cannot write its journal changes nothing.
	err = d.Do(ctx, "POST", "/v1/trials/"+pend.TrialID+"/commit", server.CommitRequest{}, nil)
	if !errors.As(err, &ae) || ae.Code != "no_space" || !strings.Contains(ae.Message, "no space left on device") {
		t.Fatalf("a commit on a full state dir: %v, want code no_space saying there is no space", err)
	}
	t.Logf("commit on a full disk: %v", err)
	if _, err := os.Stat(filepath.Join(wd, "later.txt")); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("a commit that failed for space changed the host: %v", err)
	}
	if st := trialStatus(t, f.env.Home, pend.TrialID); st != "pending" {
		t.Fatalf("the trial whose commit failed is %q", st)
	}
	f.noLeaks(d.Pid)

	// Killed and restarted while full: the daemon starts.
	d.Kill()
	d2 := f.start()
	f.noLeaks(d2.Pid)
	// Space again: everything works.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	if err := d2.Do(ctx, "POST", "/v1/trials/"+pend.TrialID+"/commit", server.CommitRequest{}, nil); err != nil {
		t.Fatalf("commit once there is space: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(wd, "later.txt")); string(b) != "later\n" {
		t.Fatalf("committed content: %q", b)
	}
	var big dryexec.StateDelta
	if err := d2.Do(ctx, "POST", "/v1/trials", f.req(wd, "head -c 1000000 /dev/zero > big"), &big); err != nil || len(big.Files) != 1 {
		t.Fatalf("a trial once there is space: %v", err)
	}
	f.checkBystander(d2)
	f.finish(d2)
}

// fill writes p until its filesystem is full.
func fill(t *testing.T, p string) {
	t.Helper()
	fh, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	buf := make([]byte, 64<<10)
	w := bufio.NewWriterSize(fh, len(buf))
	for {
		if _, err := w.Write(buf); err != nil {
			break
		}
	}
	// Small writes take the last partial blocks.
	for {
		if _, err := fh.Write(buf[:512]); err != nil {
			break
		}
	}
}

// A corrupted stored trial: asking for it or committing it gives a clear
// error that names it as corrupt (code "corrupt", store.ErrCorrupt); discard
// removes it; the listing and every other trial are unharmed. A tampered
// content blob refuses the commit (code "corrupt") with the host unchanged.
func TestCorruptTrial(t *testing.T) {
	f := setup(t)
	f.begin()
	d := f.start()
	f.recordBystander(d)
	ctx := context.Background()
	wd := f.dir("wd")
	var bad, blob dryexec.StateDelta
	if err := d.Do(ctx, "POST", "/v1/trials", f.req(wd, "echo a > a.txt"), &bad); err != nil {
		t.Fatal(err)
	}
	if err := d.Do(ctx, "POST", "/v1/trials", f.req(wd, "echo one > one.txt; echo two > two.txt"), &blob); err != nil {
		t.Fatal(err)
	}
	trialDir := func(id string) string { return filepath.Join(f.env.Home, "trials", id) }
	// Half the delta: a torn write by something outside dryexec, a bad disk.
	dp := filepath.Join(trialDir(bad.TrialID), "delta.json")
	b, _ := os.ReadFile(dp)
	if err := os.WriteFile(dp, b[:len(b)/2], 0o600); err != nil {
		t.Fatal(err)
	}
	// One of two blobs of the other trial flipped.
	bp := filepath.Join(trialDir(blob.TrialID), "blobs", blob.Files[1].SHA256)
	if err := os.WriteFile(bp, []byte("tampered\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	d.Kill()
	d2 := f.start()

	for _, c := range []struct {
		method, path string
		body         any
	}{
		{"GET", "/v1/trials/" + bad.TrialID, nil},
		{"POST", "/v1/trials/" + bad.TrialID + "/commit", server.CommitRequest{}},
	} {
		err := d2.Do(ctx, c.method, c.path, c.body, nil)
		var ae *harness.APIError
		if !errors.As(err, &ae) || ae.Code != "corrupt" || !strings.Contains(ae.Message, bad.TrialID) {
			t.Errorf("%s %s on a corrupt trial: %v, want code corrupt naming the trial", c.method, c.path, err)
		} else {
			t.Logf("%s %s: %v", c.method, c.path, err)
		}
	}
	var list struct {
		Trials []server.TrialSummary `json:"trials"`
	}
	if err := d2.Do(ctx, "GET", "/v1/trials", nil, &list); err != nil || len(list.Trials) != 2 {
		t.Errorf("listing with a corrupt trial: %v, %d trials (want the 2 readable ones)", err, len(list.Trials))
	}
	// The CLI says it too.
	out, err := f.env.Command("show", bad.TrialID).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "corrupt") {
		t.Errorf("dryexec show of a corrupt trial: %v\n%s", err, out)
	}

	// Discard removes it (nothing of it can be trusted, its status
	// included).
	if err := d2.Do(ctx, "POST", "/v1/trials/"+bad.TrialID+"/discard", nil, nil); err != nil {
		t.Errorf("discarding a corrupt trial: %v", err)
	}
	var ae *harness.APIError
	if err := d2.Do(ctx, "GET", "/v1/trials/"+bad.TrialID, nil, nil); !errors.As(err, &ae) || ae.Code != "not_found" {
		t.Errorf("a discarded corrupt trial: %v, want not_found", err)
	}

	err = d2.Do(ctx, "POST", "/v1/trials/"+blob.TrialID+"/commit", server.CommitRequest{}, nil)
	if !errors.As(err, &ae) || ae.Code != "corrupt" || !strings.Contains(ae.Message, blob.TrialID) {
		t.Fatalf("a commit with a tampered blob: %v, want code corrupt naming the trial", err)
	}
	t.Logf("commit with a tampered blob: %v", err)
	for _, n := range []string{"one.txt", "two.txt"} {
		if _, err := os.Stat(filepath.Join(wd, n)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("a refused commit left %s on the host", n)
		}
	}
	if ents, _ := os.ReadDir(wd); len(ents) != 0 {
		t.Errorf("a refused commit left files in the target dir: %v", ents)
	}
	f.checkBystander(d2)
	f.finish(d2)
}

// poolHealth is the warm pool's part of /v1/health.
type poolHealth struct {
	Pool *struct{ Size, Ready, Busy, Hits int }
}

func (f *fixture) pool(d *harness.Daemon) poolHealth {
	f.t.Helper()
	var h poolHealth
	if err := d.Do(context.Background(), "GET", "/v1/health", nil, &h); err != nil || h.Pool == nil {
		f.t.Fatalf("health: %v %+v (no pool)", err, h)
	}
	return h
}

// SIGKILL of the daemon while its warm pool prepares a sandbox: the pool's
// sandboxes (ready and half-made) die with it, the next start cleans their
// cgroups and makes a pool of its own, and trials go on.
func TestKillDaemonMidPoolRefill(t *testing.T) {
	f := setup(t)
	f.begin()
	d := f.start()
	f.recordBystander(d)
	testwait.For(t, time.Minute, "the pool to fill", func() bool { h := f.pool(d); return h.Pool.Ready >= h.Pool.Size && h.Pool.Busy == 0 })
	wd := f.dir("wd")
	var delta dryexec.StateDelta
	// The used sandbox is torn down and a new one prepared, in the
	// background: kill the daemon as soon as that is under way. On a loaded
	// machine the refill can be over before this process polls again, so a
	// trial that was not caught mid-refill is followed by another.
	var h poolHealth
	for try := 0; ; try++ {
		if try == 20 {
			t.Fatalf("no refill seen after %d trials: %+v", try, *h.Pool)
		}
		if err := d.Do(context.Background(), "POST", "/v1/trials", f.req(wd, "echo warm > w"), &delta); err != nil {
			t.Fatal(err)
		}
		if h = f.pool(d); h.Pool.Busy > 0 && h.Pool.Ready < h.Pool.Size {
			break
		}
		testwait.For(t, time.Minute, "the pool to fill again", func() bool { h := f.pool(d); return h.Pool.Ready >= h.Pool.Size && h.Pool.Busy == 0 })
	}
	if h.Pool.Hits < 1 { // this trial (the bystander may have run cold)
		t.Fatalf("the trial did not use the pool: %+v", *h.Pool)
	}
	d.Kill()
	t.Logf("killed with the pool at %+v; left for the next start: %s", *h.Pool, f.env.Leaks(f.base, f.root, f.owners))
	d2 := f.start()
	f.noLeaks(d2.Pid)
	f.checkBystander(d2)
	if err := d2.Do(context.Background(), "POST", "/v1/trials", f.req(wd, "echo again > w2"), &delta); err != nil || len(delta.Files) != 1 {
		t.Fatalf("a trial after the restart: %v %+v", err, delta.Files)
	}
	f.finish(d2)
}

// plantPartial leaves in home's store what a process killed while recording a
// trial leaves: a .partial directory with a blob and a lock file nobody holds.
func plantPartial(t *testing.T, home string) {
	t.Helper()
	dir := filepath.Join(home, "trials", dryexec.NewTrialID()+".partial")
	if err := os.MkdirAll(filepath.Join(dir, "blobs"), 0o700); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"lock", "blobs/.tmp-1"} {
		if err := os.WriteFile(filepath.Join(dir, f), nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}
