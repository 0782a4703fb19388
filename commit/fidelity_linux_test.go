package commit

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/testreq"
)

// chainDepth is how many levels of name/name/… stand under root, walked one
// descriptor at a time (the path is too long for any path-taking call), and
// the content of leaf in the deepest one ("" if there is none).
func chainDepth(t testing.TB, root, name, leaf string) (int, string) {
	t.Helper()
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for {
		next, err := unix.Openat(fd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			break
		}
		unix.Close(fd)
		fd, n = next, n+1
	}
	defer unix.Close(fd)
	lfd, err := unix.Openat(fd, leaf, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return n, ""
	}
	f := os.NewFile(uintptr(lfd), leaf)
	defer f.Close()
	b := make([]byte, 64)
	k, _ := f.Read(b)
	return n, string(b[:k])
}

// buildChain makes n levels of name under root and leaf (content data) in
// the deepest.
func buildChain(t testing.TB, root, name string, n int, leaf, data string) {
	t.Helper()
	fd, err := unix.Open(root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		if err := unix.Mkdirat(fd, name, 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := unix.Openat(fd, name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(fd)
		fd = next
	}
	defer unix.Close(fd)
	lfd, err := unix.Openat(fd, leaf, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	unix.Write(lfd, []byte(data))
	unix.Fchmod(lfd, 0o644)
	unix.Close(lfd)
}

// deep is how many levels the deep-tree tests use: with "d/" per level the
// paths reach 10,000 bytes, far past PATH_MAX (4096).
const deep = 5000

// TestDeepTree commits the creation and the deletion of a directory chain
// 5,000 levels deep, and rolls both back: in process, and by Recover after a
// crash in the middle. Every path-taking system call refuses such paths
// (ENAMETOOLONG), so only descriptor-relative work gets through.
func TestDeepTree(t *testing.T) {
	requireRoot(t)
	chainChanges := func(f *fx, create bool) changeList {
		var out changeList
		rel := ""
		for range deep {
			rel = filepath.Join(rel, "d")
			if create {
				out = append(out, f.mkdir(rel, 0o755))
			} else {
				out = append(out, f.rmdir(rel, 0o755))
			}
		}
		if create {
			return append(out, f.create(filepath.Join(rel, "leaf"), "leaf\n", 0o644))
		}
		return append(out, f.del(filepath.Join(rel, "leaf"), "leaf\n", 0o644))
	}
	t.Run("create", func(t *testing.T) {
		f := newFx(t, common)
		d := f.delta(chainChanges(f, true)...)
		fds := openFDs(t)
		if _, err := Apply(context.Background(), d, f.opt()); err != nil {
			t.Fatalf("Apply: %v", err)
		}
		if n := openFDs(t); n != fds {
			t.Errorf("%d descriptors open after Apply, %d before", n, fds)
		}
		if n, leaf := chainDepth(t, f.root, "d", "leaf"); n != deep || leaf != "leaf\n" {
			t.Errorf("host has %d levels and leaf %q, want %d and %q", n, leaf, deep, "leaf\n")
		}
		if ents, _ := os.ReadDir(f.jdir); len(ents) > 0 {
			t.Errorf("journal left: %v", ents)
		}
	})
	t.Run("delete", func(t *testing.T) {
		f := newFx(t, common)
		buildChain(t, f.root, "d", deep, "leaf", "leaf\n")
		d := f.delta(chainChanges(f, false)...)
		fds := openFDs(t)
		if _, err := Apply(context.Background(), d, f.opt()); err != nil {
			t.Fatalf("Apply: %v", err)
		}
		if n := openFDs(t); n != fds {
			t.Errorf("%d descriptors open after Apply, %d before", n, fds)
		}
		wantTree(t, "host after deleting the chain", common, f.hostSnap(), false)
		noLeftovers(t, f.base, f.jdir)
	})
	t.Run("create rolled back", func(t *testing.T) {
		f := newFx(t, common)
		d := f.delta(chainChanges(f, true)...)
		// The leaf's content is read once before anything is touched and once
		// to stage it, in the deepest new directory: the second read fails
		// with 5,000 directories made.
		f.failOpen = 2
		if _, err := Apply(context.Background(), d, f.opt()); err == nil || !strings.Contains(err.Error(), "injected") {
			t.Fatalf("Apply: %v, want the injected failure", err)
		}
		wantTree(t, "host after the rollback", common, f.hostSnap(), false)
		noLeftovers(t, f.base, f.jdir)
	})
	for _, create := range []bool{true, false} {
		t.Run(fmt.Sprintf("crash mid-way, create=%v", create), func(t *testing.T) {
			f := newFx(t, common)
			if !create {
				buildChain(t, f.root, "d", deep, "leaf", "leaf\n")
			}
			d := f.delta(chainChanges(f, create)...)
			// Points: the journal, staging (when the leaf's dir exists), the
			// staged journal, then one per step: stop half-way through.
			crashed, state := crashAt(t, f, d, 3+deep/2, false)
			if !crashed || state != stateStaged {
				t.Fatalf("crashed %v in state %q, want a crash in state staged", crashed, state)
			}
			if n, _ := chainDepth(t, f.root, "d", "leaf"); (create && n == 0) || (!create && n == deep) {
				t.Fatalf("the crash left %d levels: not mid-way", n)
			}
			rec, err := Recover(f.jdir)
			if err != nil || len(rec) != 1 || rec[0].Committed {
				t.Fatalf("Recover: %+v, %v", rec, err)
			}
			n, leaf := chainDepth(t, f.root, "d", "leaf")
			if create && n != 0 {
				t.Errorf("after recovery the host has %d levels, want none", n)
			}
			if !create && (n != deep || leaf != "leaf\n") {
				t.Errorf("after recovery the host has %d levels and leaf %q, want %d and %q", n, leaf, deep, "leaf\n")
			}
			if create {
				wantTree(t, "host after recovery", common, f.hostSnap(), false)
			}
			if l := leftovers(t, f.root); len(l) > 0 {
				t.Errorf("temp/backup files left behind: %v", l)
			}
		})
	}
}

// TestExactBytes: names are bytes, not text. Deleting v\xff must never touch
// v\ufffd (which is what v\xff becomes as UTF-8 text), also when a crash
// leaves the rollback to the journal; a created name is exactly the trial's.
func TestExactBytes(t *testing.T) {
	requireRoot(t)
	before := common.with("v\xff", reg("invalid\n", 0o644), "v\ufffd", reg("replacement\n", 0o644),
		"d\xff", dir(0o755), "d\xff/in", reg("in\n", 0o644))
	changes := func(f *fx) changeList {
		return changeList{
			f.del("v\xff", "invalid\n", 0o644),
			f.del("d\xff/in", "in\n", 0o644), f.rmdir("d\xff", 0o755),
			f.create("bad\xff\xfe.txt", "bad\n", 0o644),
			f.symlink("ln\xfe", "target\xff"),
		}
	}
	after := common.with("v\ufffd", reg("replacement\n", 0o644), "bad\xff\xfe.txt", reg("bad\n", 0o644),
		"ln\xfe", sym("target\xff"))
	t.Run("apply", func(t *testing.T) {
		f := newFx(t, before)
		if _, err := Apply(context.Background(), f.delta(changes(f)...), f.opt()); err != nil {
			t.Fatalf("Apply: %v", err)
		}
		wantTree(t, "host", after, f.hostSnap(), false)
		noLeftovers(t, f.base, f.jdir)
	})
	// A crash after each step: Recover must put back exactly the old names.
	for n := 3; n <= 3+6; n++ {
		t.Run(fmt.Sprintf("crash at %d", n), func(t *testing.T) {
			f := newFx(t, before)
			snap := f.hostSnap()
			crashed, state := crashAt(t, f, f.delta(changes(f)...), n, false)
			if !crashed {
				t.Fatal("no crash")
			}
			checkRecovered(t, f, n, state, snap, after)
		})
	}
	t.Run("conflict check reads the exact name", func(t *testing.T) {
		// The host's v\xff changed; v\ufffd is as the trial saw v\xff.
		f := newFx(t, common.with("v\xff", reg("changed\n", 0o644), "v\ufffd", reg("invalid\n", 0o644)))
		_, err := Apply(context.Background(), f.delta(f.del("v\xff", "invalid\n", 0o644)), f.opt())
		var ce *dryexec.CommitConflictError
		if !errors.As(err, &ce) || len(ce.Conflicts) != 1 || ce.Conflicts[0].Path != f.p("v\xff") {
			t.Fatalf("Apply: %v, want a conflict at v\\xff", err)
		}
		if !strings.Contains(err.Error(), `v\xff"`) {
			t.Errorf("the message does not quote the name's bytes: %v", err)
		}
	})
}

// TestFIFO: a created FIFO is committed as a FIFO with its mode and owner.
func TestFIFO(t *testing.T) {
	requireRoot(t)
	f := newFx(t, common)
	d := f.delta(owned(f.mkfifo("p", 0o640), 1234, 5678), f.mkdir("nd", 0o755), f.mkfifo("nd/q", 0o4604))
	if _, err := Apply(context.Background(), d, f.opt()); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	wantTree(t, "host", common.with("p", fifo(0o640).own(1234, 5678), "nd", dir(0o755), "nd/q", fifo(0o4604)), f.hostSnap(), false)
	noLeftovers(t, f.base, f.jdir)
}

// TestUncommittableRefused: a socket or device node, and a file whose content
// was not kept, are refused, every one named, before anything is touched.
func TestUncommittableRefused(t *testing.T) {
	requireRoot(t)
	f := newFx(t, common.with("m", reg("m\n", 0o644)))
	sock := f.create("sock", "", 0o755)
	sock.Kind, sock.SHA256 = dryexec.KindOther, ""
	big := f.create("big", "not stored\n", 0o644)
	big.NotKept("over the trial's content cap")
	mod := f.modify("m", "m\n", 0o644, "m new\n", 0o644)
	mod.NotKept("")
	d := f.delta(f.create("fine", "fine\n", 0o644), sock, big, mod)
	snap := f.hostSnap()
	_, err := Apply(context.Background(), d, f.opt())
	var ue *dryexec.UncommittableError
	if !errors.As(err, &ue) || !errors.Is(err, dryexec.ErrCommitRefused) {
		t.Fatalf("Apply: %v (%T), want a *dryexec.UncommittableError", err, err)
	}
	var got []string
	for _, u := range ue.Paths {
		got = append(got, u.Path)
	}
	if want := []string{f.p("sock"), f.p("big"), f.p("m")}; !slices.Equal(got, want) {
		t.Errorf("refused %v, want %v", got, want)
	}
	if !strings.Contains(err.Error(), "over the trial's content cap") || !strings.Contains(err.Error(), "socket or a device") {
		t.Errorf("the message does not say why: %v", err)
	}
	wantTree(t, "host after the refusal", snap, f.hostSnap(), true)
	noLeftovers(t, f.base, f.jdir)
}

// TestHardLinks: created files of one link group are one inode on the host,
// in existing and new directories alike.
func TestHardLinks(t *testing.T) {
	requireRoot(t)
	cases := []struct {
		name  string
		group []string // created in this order
	}{
		{"existing dirs", []string{"h1", "keepdir/h2", "h3"}},
		{"new dir first", []string{"nd/h1", "h2", "keepdir/h3"}},
		{"all in new dirs", []string{"nd/h1", "nd/sub/h2", "nd/h3"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFx(t, common)
			changes := changeList{f.mkdir("nd", 0o755), f.mkdir("nd/sub", 0o755), f.create("other", "linked\n", 0o644)}
			for _, p := range c.group {
				changes = append(changes, linked(owned(f.create(p, "linked\n", 0o640), 1234, 5678), 3))
			}
			if _, err := Apply(context.Background(), f.delta(changes...), f.opt()); err != nil {
				t.Fatalf("Apply: %v", err)
			}
			var ino uint64
			for _, p := range c.group {
				var st unix.Stat_t
				if err := unix.Lstat(f.p(p), &st); err != nil {
					t.Fatal(err)
				}
				if ino == 0 {
					ino = st.Ino
				}
				if st.Ino != ino || st.Nlink != uint64(len(c.group)) || st.Mode&0o7777 != 0o640 || st.Uid != 1234 {
					t.Errorf("%s: inode %d nlink %d mode %o uid %d, want inode %d nlink %d mode 640 uid 1234",
						p, st.Ino, st.Nlink, st.Mode&0o7777, st.Uid, ino, len(c.group))
				}
			}
			var st unix.Stat_t
			if unix.Lstat(f.p("other"), &st) == nil && st.Ino == ino {
				t.Error("a file outside the group shares its inode")
			}
			noLeftovers(t, f.base, f.jdir)
		})
	}
	t.Run("different contents", func(t *testing.T) {
		f := newFx(t, common)
		d := f.delta(linked(f.create("a", "a\n", 0o644), 1), linked(f.create("b", "b\n", 0o644), 1))
		snap := f.hostSnap()
		if _, err := Apply(context.Background(), d, f.opt()); err == nil {
			t.Fatal("Apply linked two different contents")
		}
		wantTree(t, "host", snap, f.hostSnap(), true)
	})
}

// TestMtimes: every created or modified file, symlink, FIFO and directory
// ends with the mtime the trial left, to the nanosecond.
func TestMtimes(t *testing.T) {
	requireRoot(t)
	base := time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC).UnixNano()
	f := newFx(t, common.with("m", reg("m\n", 0o644)))
	want := map[string]int64{}
	stamp := func(fc dryexec.FileChange, rel string, i int64) dryexec.FileChange {
		ns := base + i*1_000_000_123
		want[rel] = ns
		return at(fc, ns)
	}
	d := f.delta(
		stamp(f.create("new.txt", "new\n", 0o644), "new.txt", 1),
		stamp(f.modify("m", "m\n", 0o644, "m new\n", 0o600), "m", 2),
		stamp(f.symlink("ln", "new.txt"), "ln", 3),
		stamp(f.mkdir("nd", 0o755), "nd", 4),
		stamp(f.mkdir("nd/sub", 0o500), "nd/sub", 5),
		stamp(f.create("nd/sub/f", "f\n", 0o644), "nd/sub/f", 6),
		stamp(f.mkfifo("nd/p", 0o600), "nd/p", 7),
		stamp(linked(f.create("nd/h1", "h\n", 0o644), 1), "nd/h1", 8),
		stamp(linked(f.create("h2", "h\n", 0o644), 1), "h2", 8),
	)
	if _, err := Apply(context.Background(), d, f.opt()); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	for rel, ns := range want {
		var st unix.Stat_t
		if err := unix.Lstat(f.p(rel), &st); err != nil {
			t.Fatal(err)
		}
		if got := st.Mtim.Nano(); got != ns {
			t.Errorf("%s: mtime %s, want %s", rel, time.Unix(0, got).UTC(), time.Unix(0, ns).UTC())
		}
	}
}

// TestMakeUpToDate: after committing what a make run built, make -q on the
// host says there is nothing to do. The delta lists the target before its
// generated prerequisite (and much else between), so mtimes taken from the
// commit's own clock would make the target look older.
func TestMakeUpToDate(t *testing.T) {
	requireRoot(t)
	mk := testreq.NeedTool(t, "make")
	makefile := "prog: gen.h\n\tcat gen.h > prog\ngen.h: gen.in\n\tcat gen.in > gen.h\n"
	f := newFx(t, tree{"Makefile": reg(makefile, 0o644), "gen.in": reg("in\n", 0o644)})
	old := time.Now().Add(-time.Hour)
	for _, p := range []string{"Makefile", "gen.in"} {
		if err := os.Chtimes(f.p(p), old, old); err != nil {
			t.Fatal(err)
		}
	}
	t0 := old.Add(30 * time.Minute).UnixNano()
	changes := changeList{at(f.create("prog", "in\n", 0o644), t0+2_000_000)}
	for i := range 2000 {
		changes = append(changes, f.create(fmt.Sprintf("filler%04d", i), fmt.Sprintf("%d\n", i), 0o644))
	}
	changes = append(changes, at(f.create("gen.h", "in\n", 0o644), t0+1_000_000))
	if _, err := Apply(context.Background(), f.delta(changes...), f.opt()); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	out, err := exec.Command(mk, "-q", "-C", f.root, "prog").CombinedOutput()
	if err != nil {
		t.Errorf("make -q after the commit: %v (%s): it would rebuild", err, out)
	}
}

// TestPrehash: a stored content that is not what the delta says is found
// before the host is touched at all: no temp is made beside its target (the
// directory's mtime says so), no journal is written.
func TestPrehash(t *testing.T) {
	requireRoot(t)
	f := newFx(t, common.with("a", reg("a\n", 0o644)))
	d := f.delta(f.modify("a", "a\n", 0o644, "a new\n", 0o644), f.create("keepdir/b", "b\n", 0o644),
		f.create("z", "z\n", 0o644))
	f.corrupt[d.Files[2].SHA256] = true
	old := time.Now().Add(-time.Hour)
	for _, p := range []string{".", "keepdir"} {
		os.Chtimes(f.p(p), old, old)
	}
	opt := f.opt()
	hooked := 0
	opt.Hook = func(int) { hooked++ }
	_, err := Apply(context.Background(), d, opt)
	if !errors.Is(err, ErrContentMismatch) {
		t.Fatalf("Apply: %v, want ErrContentMismatch", err)
	}
	if hooked > 0 {
		t.Errorf("the commit reached %d of its numbered points (the first is the journal written)", hooked)
	}
	for _, p := range []string{".", "keepdir"} {
		if fi, err := os.Stat(f.p(p)); err != nil || !fi.ModTime().Equal(old) {
			t.Errorf("%s was written to (mtime %v)", p, fi.ModTime())
		}
	}
	if _, err := os.Stat(f.jdir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a journal dir was made: %v", err)
	}
}

// TestSkipUncommittable: asked to, commit applies everything but exactly the
// paths it cannot write, and reports each one.
func TestSkipUncommittable(t *testing.T) {
	requireRoot(t)
	f := newFx(t, common)
	sock := f.create("nd/sock", "", 0o755)
	sock.Kind, sock.SHA256 = dryexec.KindOther, ""
	big := f.create("big", "not stored\n", 0o644)
	big.NotKept("over the trial's content cap")
	d := f.delta(f.mkdir("nd", 0o755), sock, f.create("nd/fine", "fine\n", 0o644), big, f.create("fine", "fine\n", 0o644))
	opt := f.opt()
	opt.SkipUncommittable = true
	var skipped []string
	opt.OnSkip = func(u dryexec.Uncommittable) { skipped = append(skipped, u.Path) }
	applied, err := Apply(context.Background(), d, opt)
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if want := []string{f.p("nd/sock"), f.p("big")}; !slices.Equal(skipped, want) {
		t.Errorf("skipped %v, want %v", skipped, want)
	}
	if len(applied) != 3 {
		t.Errorf("applied %d changes, want 3", len(applied))
	}
	wantTree(t, "host", common.with("nd", dir(0o755), "nd/fine", reg("fine\n", 0o644), "fine", reg("fine\n", 0o644)), f.hostSnap(), false)
	noLeftovers(t, f.base, f.jdir)
}

// openFDs counts this process's open descriptors.
func openFDs(t testing.TB) int {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	return len(ents)
}

// TestRecoverOldJournal: a journal written before directories were tabled
// (every step's paths in full) is still rolled back: a commit killed before
// an upgrade is recovered by the new binary.
func TestRecoverOldJournal(t *testing.T) {
	requireRoot(t)
	// Crash ten steps into the apply, with renames done.
	var f *fx
	var snap tree
	var state string
	n, past := 0, 0
	for past < 10 {
		n++
		f = newFx(t, every.before)
		snap = f.hostSnap()
		var crashed bool
		crashed, state = crashAt(t, f, f.delta(every.changes(f)...), n, false)
		if !crashed {
			t.Fatal("the commit ended before ten steps were applied")
		}
		if state == stateStaged {
			past++
		}
		if past < 10 {
			Recover(f.jdir)
		}
	}
	b, err := os.ReadFile(journalPath(f.jdir, testTrial))
	if err != nil {
		t.Fatal(err)
	}
	var j journal
	if err := json.Unmarshal(b, &j); err != nil {
		t.Fatal(err)
	}
	old := struct {
		Trial string     `json:"trial"`
		State string     `json:"state"`
		Steps []stepJSON `json:"steps"`
	}{Trial: j.Trial, State: j.State}
	for _, s := range j.Steps {
		if !utf8.ValidString(s.Path + s.Temp + s.Backup) {
			continue // the old form could not hold these; the rest must still roll back
		}
		old.Steps = append(old.Steps, stepJSON(s))
	}
	ob, _ := json.Marshal(old)
	if strings.Contains(string(ob), `"dirs"`) || !strings.Contains(string(ob), `"path":"`+f.root) {
		t.Fatalf("not the old form: %.200s", ob)
	}
	os.WriteFile(journalPath(f.jdir, testTrial), ob, 0o600)
	// What the old form leaves out (names that are not UTF-8) is undone by
	// hand, as the old binary would have failed to.
	j.Steps = slices.DeleteFunc(j.Steps, func(s step) bool { return utf8.ValidString(s.Path + s.Temp + s.Backup) })
	if err := undo(&j, nil); err != nil {
		t.Fatal(err)
	}
	checkRecovered(t, f, n, state, snap, every.after)
}

// TestLinkToHostFile: a host file that only gained hard links in the trial
// (cp -al, git's local clone) stays the same inode, mtime and bytes, and the
// new paths become links to it; a host file swapped for other bytes after the
// conflict check is never what a new path gets.
func TestLinkToHostFile(t *testing.T) {
	requireRoot(t)
	f := newFx(t, common.with("h", reg("host\n", 0o644)))
	old := time.Now().Add(-time.Hour)
	if err := os.Chtimes(f.p("h"), old, old); err != nil {
		t.Fatal(err)
	}
	var before unix.Stat_t
	if err := unix.Lstat(f.p("h"), &before); err != nil {
		t.Fatal(err)
	}
	d := f.delta(f.mkdir("nd", 0o755),
		linked(f.modify("h", "host\n", 0o644, "host\n", 0o644), 1),
		linked(f.create("nd/h", "host\n", 0o644), 1),
		linked(f.create("keepdir/h", "host\n", 0o644), 1))
	if _, err := Apply(context.Background(), d, f.opt()); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	for _, p := range []string{"h", "nd/h", "keepdir/h"} {
		var st unix.Stat_t
		if err := unix.Lstat(f.p(p), &st); err != nil {
			t.Fatal(err)
		}
		if st.Ino != before.Ino || st.Nlink != 3 || st.Mtim != before.Mtim {
			t.Errorf("%s: inode %d nlink %d mtime %v, want the host file's inode %d, 3 links, mtime %v",
				p, st.Ino, st.Nlink, st.Mtim, before.Ino, before.Mtim)
		}
	}
	noLeftovers(t, f.base, f.jdir)
}

// TestLinkOverHostFile: `ln -f a b` over two host files (and a link of a new
// file over a host file) makes them one inode in the trial, and the delta says
// so (one link_group; b a modify). Commit wrote b as a file of its own, so the
// host got two files where the delta showed one: a change unlike the one shown.
// Every path of a group ends up as one inode, the host file's where it only
// gained links.
func TestLinkOverHostFile(t *testing.T) {
	requireRoot(t)
	f := newFx(t, common.with("a", reg("A\n", 0o644), "b", reg("B\n", 0o644),
		"c", reg("C\n", 0o644), "d", reg("D\n", 0o600)))
	var before unix.Stat_t
	if err := unix.Lstat(f.p("a"), &before); err != nil {
		t.Fatal(err)
	}
	d := f.delta(
		linked(f.modify("a", "A\n", 0o644, "A\n", 0o644), 1),
		linked(f.modify("b", "B\n", 0o644, "A\n", 0o644), 1),
		linked(f.create("nd", "N\n", 0o640), 2),
		linked(f.modify("c", "C\n", 0o644, "N\n", 0o640), 2),
		linked(f.modify("d", "D\n", 0o600, "N\n", 0o640), 2))
	if _, err := Apply(context.Background(), d, f.opt()); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	groups := [][]string{{"a", "b"}, {"nd", "c", "d"}}
	for _, g := range groups {
		var first unix.Stat_t
		for i, p := range g {
			var st unix.Stat_t
			if err := unix.Lstat(f.p(p), &st); err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				first = st
				continue
			}
			if st.Ino != first.Ino || int(st.Nlink) != len(g) {
				t.Errorf("%s: inode %d, %d links; want %s's inode %d, %d links (one file in the delta)",
					p, st.Ino, st.Nlink, g[0], first.Ino, len(g))
			}
		}
	}
	if got, _ := os.ReadFile(f.p("b")); string(got) != "A\n" {
		t.Errorf("b holds %q, want %q", got, "A\n")
	}
	var st unix.Stat_t
	if err := unix.Lstat(f.p("a"), &st); err != nil || st.Ino != before.Ino {
		t.Errorf("a is no longer the host's inode %d (%v)", before.Ino, err)
	}
	noLeftovers(t, f.base, f.jdir)
}

// TestTempNamesInTheDelta: commit's temp and backup names are
// .dryexec-TAG-N beside each path, and a command can learn its trial id (the
// cgroup path in /proc/self/cgroup), so a trial can create those very names.
// Commit then failed ("file exists") on a delta it had been shown; it now
// never picks a name the delta writes.
func TestTempNamesInTheDelta(t *testing.T) {
	requireRoot(t)
	f := newFx(t, common.with("a", reg("old\n", 0o644), "gone", reg("g\n", 0o644)))
	tag := ".dryexec-" + strings.TrimPrefix(testTrial, "tr_") + "-"
	d := f.delta(
		f.create(tag+"1", "planted 1\n", 0o644),
		f.create(tag+"2", "planted 2\n", 0o644),
		f.create(tag+"3.old", "planted 3\n", 0o644),
		f.modify("a", "old\n", 0o644, "new\n", 0o644),
		f.del("gone", "g\n", 0o644),
		f.create("b", "b\n", 0o644))
	if _, err := Apply(context.Background(), d, f.opt()); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	want := map[string]string{tag + "1": "planted 1\n", tag + "2": "planted 2\n", tag + "3.old": "planted 3\n", "a": "new\n", "b": "b\n"}
	for p, w := range want {
		if got, err := os.ReadFile(f.p(p)); err != nil || string(got) != w {
			t.Errorf("%s holds %q (%v), want %q", p, got, err, w)
		}
	}
	if _, err := os.Lstat(f.p("gone")); err == nil {
		t.Error("gone is still there")
	}
}
