package commit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/testreq"
)

// crashPanic is what the hook panics with to stop Apply where a crash would.
type crashPanic struct{ point int }

// journalState reads the state of the test trial's journal ("" if none).
func journalState(t testing.TB, jdir string) string {
	b, err := os.ReadFile(journalPath(jdir, testTrial))
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	if err != nil {
		t.Fatal(err)
	}
	var j journal
	if err := json.Unmarshal(b, &j); err != nil {
		t.Fatalf("journal: %v", err)
	}
	return j.State
}

// crashAt runs Apply and stops it dead at hook point n. It returns whether the
// crash happened (false: Apply finished without reaching n) and the journal's
// state at that point.
func crashAt(t testing.TB, f *fx, d *dryexec.StateDelta, n int, force bool) (crashed bool, state string) {
	t.Helper()
	opt := f.opt()
	opt.Force = force
	opt.Hook = func(p int) {
		if p == n {
			state = journalState(t, f.jdir)
			panic(crashPanic{p})
		}
	}
	defer func() {
		if r := recover(); r != nil {
			if _, ok := r.(crashPanic); !ok {
				panic(r)
			}
			crashed = true
		}
	}()
	if _, err := Apply(context.Background(), d, opt); err != nil {
		t.Fatalf("Apply (to crash at %d): %v", n, err)
	}
	return false, ""
}

// crashRuns counts the crashes the crash tests simulated.
var crashRuns, killRuns int

// checkRecovered runs Recover after a crash seen in journal state state and
// checks that the host is exactly the old tree (rolled back, inodes and all)
// or exactly the new one, as that state demands.
func checkRecovered(t *testing.T, f *fx, n int, state string, before, after tree) (committed bool) {
	t.Helper()
	rec, err := Recover(f.jdir)
	if err != nil {
		t.Fatalf("crash at %d (%s): Recover: %v", n, state, err)
	}
	if len(rec) != 1 || rec[0].Trial != testTrial {
		t.Fatalf("crash at %d (%s): Recover returned %+v", n, state, rec)
	}
	wantForward := state == stateApplied
	if rec[0].Committed != wantForward {
		t.Errorf("crash at %d (%s): Committed=%v", n, state, rec[0].Committed)
	}
	got := f.hostSnap()
	dOld, dNew := diffTrees(before, got, true), diffTrees(after, got, false)
	switch {
	case wantForward && len(dNew) > 0:
		t.Errorf("crash at %d (%s): not rolled forward:\n  %v\n(vs old: %v)", n, state, dNew, dOld)
	case !wantForward && len(dOld) > 0:
		t.Errorf("crash at %d (%s): not rolled back:\n  %v\n(vs new: %v)", n, state, dOld, dNew)
	}
	noLeftovers(t, f.base, f.jdir)
	if rec, err := Recover(f.jdir); err != nil || len(rec) != 0 {
		t.Errorf("second Recover: %v, %v", rec, err)
	}
	return rec[0].Committed
}

// TestCrashRecovery stops Apply at every numbered point of every case and
// checks what Recover makes of it.
func TestCrashRecovery(t *testing.T) {
	requireRoot(t)
	for _, c := range applyCases() {
		t.Run(c.name, func(t *testing.T) {
			var back, fwd int
			for n := 1; ; n++ {
				f := newFx(t, c.before)
				d := f.delta(c.changes(f)...)
				before := f.hostSnap()
				crashed, state := crashAt(t, f, d, n, c.force)
				if !crashed {
					wantTree(t, "host after a full Apply", c.after, f.hostSnap(), false)
					noLeftovers(t, f.base, f.jdir)
					break
				}
				crashRuns++
				if state != statePlanned && state != stateStaged && state != stateApplied {
					t.Fatalf("crash at %d: journal state %q", n, state)
				}
				if fwd > 0 && state != stateApplied {
					t.Errorf("crash at %d: journal back in state %s after it was applied", n, state)
				}
				if checkRecovered(t, f, n, state, before, c.after) {
					fwd++
				} else {
					back++
				}
				if t.Failed() {
					return
				}
			}
			if back == 0 || fwd == 0 {
				t.Errorf("%d crashes rolled back, %d forward; want both", back, fwd)
			}
			t.Logf("%d crash points: %d rolled back, %d forward", back+fwd, back, fwd)
		})
	}
	t.Logf("%d simulated crashes", crashRuns)
	if crashRuns < 50 && !t.Failed() {
		t.Errorf("only %d crashes simulated", crashRuns)
	}
}

// The kill test runs Apply in a child process that SIGKILLs itself at hook
// point n, so that no deferred function and no rollback runs in it: this is
// what a crash does and the in-process panic above only approximates.

const childEnv = "DRYEXEC_COMMIT_CHILD"

type killJob struct {
	Delta   *dryexec.StateDelta `json:"delta"`
	BlobDir string              `json:"blob_dir"`
	Journal string              `json:"journal"`
	Point   int                 `json:"point"` // 0: no kill
	// KillAfter, when set, kills the child that long after Apply starts,
	// wherever it is then.
	KillAfter time.Duration `json:"kill_after"`
	// TimeFile, when set, receives how long Apply took.
	TimeFile string `json:"time_file"`
	// Refused: Apply must fail with a *dryexec.UncommittableError naming
	// this path, before writing anything.
	Refused string `json:"refused,omitempty"`
}

// TestApplyChild is the child's side of TestKillRecovery and TestNotRoot; it

// runAs runs job's Apply for f's host in a child process as uid (no
// supplementary groups), which must succeed (or refuse as job.Refused says).
func runAs(t *testing.T, f *fx, setpriv string, uid int, job killJob) {
	t.Helper()
	work := filepath.Join(f.base, "work")
	blobDir := filepath.Join(work, "blobs")
	os.MkdirAll(blobDir, 0o755)
	os.Chmod(work, 0o755)
	for s, b := range f.blobs {
		os.WriteFile(filepath.Join(blobDir, s), b, 0o644)
	}
	job.BlobDir, job.Journal = blobDir, f.jdir
	jb, _ := json.Marshal(job)
	jobPath := filepath.Join(work, "job.json")
	os.WriteFile(jobPath, jb, 0o644)
	bin := filepath.Join(work, "commit.test")
	b, err := os.ReadFile(os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(setpriv, fmt.Sprintf("--reuid=%d", uid), fmt.Sprintf("--regid=%d", uid), "--clear-groups",
		bin, "-test.run=^TestApplyChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), childEnv+"="+jobPath)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("commit as uid %d: %v\n%s", uid, err, out)
	}
}

// TestNotRootChown: a commit not as root refuses an owner change the caller
// cannot make (a file given to root) with a typed error, before it writes
// anything of the delta.
func TestNotRootChown(t *testing.T) {
	requireRoot(t)
	setpriv := testreq.NeedRootless(t)
	const uid = 65534
	f := newFx(t, tree{"mine.txt": reg("mine\n", 0o644).own(uid, uid)})
	for d := f.base; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	os.Chown(f.root, uid, uid)
	os.MkdirAll(f.jdir, 0o700)
	os.Chown(f.jdir, uid, uid)
	d := f.delta(f.create("new", "n\n", 0o644), chowned(f.chmodFile("mine.txt", "mine\n", 0o644, 0o644), uid, uid, 0, uid))
	before := f.hostSnap()
	runAs(t, f, setpriv, uid, killJob{Delta: d, Refused: f.p("mine.txt")})
	wantTree(t, "host after a refused commit", before, f.hostSnap(), true)
}

// does nothing in a normal run.
func TestApplyChild(t *testing.T) {
	p := os.Getenv(childEnv)
	if p == "" {
		t.Skip("only run by TestKillRecovery and TestNotRoot")
	}
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var job killJob
	if err := json.Unmarshal(b, &job); err != nil {
		t.Fatal(err)
	}
	if job.KillAfter > 0 {
		time.AfterFunc(job.KillAfter, func() { unix.Kill(os.Getpid(), unix.SIGKILL) })
	}
	start := time.Now()
	_, err = Apply(context.Background(), job.Delta, Options{
		JournalDir: job.Journal,
		OpenBlob:   func(sha string) (io.ReadCloser, error) { return os.Open(filepath.Join(job.BlobDir, sha)) },
		Hook: func(p int) {
			if job.Point > 0 && p == job.Point {
				unix.Kill(os.Getpid(), unix.SIGKILL)
				select {} // not reached
			}
		},
	})
	if job.Refused != "" {
		var ue *dryexec.UncommittableError
		if !errors.As(err, &ue) || len(ue.Paths) != 1 || ue.Paths[0].Path != job.Refused {
			t.Fatalf("Apply: %v, want an *UncommittableError naming %s alone", err, job.Refused)
		}
		t.Logf("refused: %v", err)
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if job.TimeFile != "" {
		os.WriteFile(job.TimeFile, []byte(time.Since(start).String()), 0o644)
	}
}

// runChild runs job's Apply in a child process for f's host and says whether
// the child was killed.
func runChild(t *testing.T, f *fx, job killJob) (killed bool) {
	t.Helper()
	work := t.TempDir()
	job.BlobDir = filepath.Join(work, "blobs")
	job.Journal = f.jdir
	os.Mkdir(job.BlobDir, 0o700)
	for s, b := range f.blobs {
		os.WriteFile(filepath.Join(job.BlobDir, s), b, 0o600)
	}
	jb, _ := json.Marshal(job)
	jobPath := filepath.Join(work, "job.json")
	os.WriteFile(jobPath, jb, 0o600)
	cmd := exec.Command(os.Args[0], "-test.run=^TestApplyChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), childEnv+"="+jobPath)
	out, err := cmd.CombinedOutput()
	if err == nil {
		return false
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child: %v\n%s", err, out)
	}
	return true
}

// TestKillAnywhere kills a child process at random times during a larger
// commit, between the numbered points as well as at them.
func TestKillAnywhere(t *testing.T) {
	requireRoot(t)
	if testing.Short() {
		t.Skip("runs a process per kill")
	}
	before, after := every.before, every.after
	bulk := func(f *fx) changeList {
		var out changeList
		for d := range 10 {
			out = append(out, f.mkdir(fmt.Sprintf("bulk%02d", d), 0o755))
			for i := range 40 {
				out = append(out, f.create(fmt.Sprintf("bulk%02d/f%02d", d, i), fmt.Sprintf("%d/%d\n", d, i), 0o644))
			}
		}
		return out
	}
	for d := range 10 {
		after = after.with(fmt.Sprintf("bulk%02d", d), dir(0o755))
		for i := range 40 {
			after = after.with(fmt.Sprintf("bulk%02d/f%02d", d, i), reg(fmt.Sprintf("%d/%d\n", d, i), 0o644))
		}
	}
	changes := func(f *fx) changeList { return append(bulk(f), every.changes(f)...) }
	// How long does the whole commit take in a child?
	f := newFx(t, before)
	timeFile := filepath.Join(t.TempDir(), "time")
	if runChild(t, f, killJob{Delta: f.delta(changes(f)...), TimeFile: timeFile}) {
		t.Fatal("child killed")
	}
	wantTree(t, "host after a full Apply", after, f.hostSnap(), false)
	tb, _ := os.ReadFile(timeFile)
	full, err := time.ParseDuration(string(tb))
	if err != nil {
		t.Fatal(err)
	}
	const runs = 12
	var back, fwd, done int
	for i := range runs {
		f := newFx(t, before)
		d := f.delta(changes(f)...)
		snap := f.hostSnap()
		at := full * 7 / 10 * time.Duration(i+1) / runs // the first child ran colder
		if !runChild(t, f, killJob{Delta: d, KillAfter: at}) {
			done++
			wantTree(t, "host after a full Apply", after, f.hostSnap(), false)
			continue
		}
		state := journalState(t, f.jdir)
		if state == "" {
			// Killed before the first journal was in place (a .json.tmp may
			// be), or after the last was removed: nothing to roll, the tree
			// says which.
			if rec, err := Recover(f.jdir); err != nil || len(rec) != 0 {
				t.Errorf("killed at %v with no journal: Recover: %v, %v", at, rec, err)
			}
			if diffTrees(snap, f.hostSnap(), true) != nil && diffTrees(after, f.hostSnap(), false) != nil {
				t.Errorf("killed at %v with no journal: host is neither old nor new", at)
			}
			noLeftovers(t, f.base, f.jdir)
			continue
		}
		if checkRecovered(t, f, i, state, snap, after) {
			fwd++
		} else {
			back++
		}
	}
	t.Logf("full commit %v; %d kills rolled back, %d forward, %d came too late", full, back, fwd, done)
}

func TestKillRecovery(t *testing.T) {
	requireRoot(t)
	if testing.Short() {
		t.Skip("runs a process per crash point")
	}
	c := every
	var back, fwd int
	for n := 1; ; n++ {
		f := newFx(t, c.before)
		d := f.delta(c.changes(f)...)
		before := f.hostSnap()
		if !runChild(t, f, killJob{Delta: d, Point: n}) {
			wantTree(t, "host after a full Apply", c.after, f.hostSnap(), false)
			noLeftovers(t, f.base, f.jdir)
			break
		}
		killRuns++
		state := journalState(t, f.jdir)
		if checkRecovered(t, f, n, state, before, c.after) {
			fwd++
		} else {
			back++
		}
		if t.Failed() {
			return
		}
	}
	if back == 0 || fwd == 0 {
		t.Errorf("%d kills rolled back, %d forward; want both", back, fwd)
	}
	t.Logf("%s", fmt.Sprintf("%d kill points: %d rolled back, %d forward", back+fwd, back, fwd))
}

// TestNotRoot commits as an ordinary user who owns the tree: a new read-only
// dir (as the Go module cache makes them) must still be filled.
func TestNotRoot(t *testing.T) {
	requireRoot(t)
	setpriv := testreq.NeedRootless(t)
	const uid = 65534
	u := func(n node) node { return n.own(uid, uid) }
	before := tree{"mine.txt": u(reg("mine\n", 0o644)), "del": u(reg("del\n", 0o644)), "x": u(reg("x\n", 0o644)),
		"src": u(dir(0o755)), "src/old": u(reg("old\n", 0o644)), "theirs": reg("theirs\n", 0o666)}
	f := newFx(t, before)
	f.age()
	// The user needs to reach everything: the test's temp dirs are 0700 root's.
	for d := f.base; d != os.TempDir() && d != "/"; d = filepath.Dir(d) {
		os.Chmod(d, 0o755)
	}
	os.Chown(f.root, uid, uid)
	os.MkdirAll(f.jdir, 0o700)
	os.Chown(f.jdir, uid, uid)
	// Touched: the user's own file (its mtime is set) and root's, whose
	// mtime the user may not set: left as it is, the commit goes on.
	d := f.deltaT(changeList{f.touched("src/old", trialNS(1)), f.touched("theirs", trialNS(2))},
		f.modify("mine.txt", "mine\n", 0o644, "mine 2\n", 0o600),
		f.del("del", "del\n", 0o644),
		f.chmodFile("x", "x\n", 0o644, 0o755),
		f.mkdir("mod", 0o555), f.create("mod/a.go", "package a\n", 0o444),
		f.mkdir("mod/sub", 0o555), f.create("mod/sub/b.go", "package b\n", 0o444),
		f.symlink("mod/sub/ln", "b.go"),
		f.create("src/new", "new\n", 0o644),
		f.mkdir("wx", 0o300), f.create("wx/hidden", "h\n", 0o600),
	)
	runAs(t, f, setpriv, uid, killJob{Delta: d})
	wantTree(t, "host", tree{"mine.txt": u(reg("mine 2\n", 0o600)), "x": u(reg("x\n", 0o755)),
		"mod": u(dir(0o555)), "mod/a.go": u(reg("package a\n", 0o444)), "mod/sub": u(dir(0o555)),
		"mod/sub/b.go": u(reg("package b\n", 0o444)), "mod/sub/ln": u(sym("b.go")),
		"src": u(dir(0o755)), "src/old": u(reg("old\n", 0o644)), "src/new": u(reg("new\n", 0o644)),
		"wx": u(dir(0o300)), "wx/hidden": u(reg("h\n", 0o600)), "theirs": reg("theirs\n", 0o666),
	}, f.hostSnap(), false)
	f.wantMtimes("after commit", map[string]int64{"src/old": trialNS(1), "theirs": old})
	noLeftovers(t, f.base, f.jdir)
}
