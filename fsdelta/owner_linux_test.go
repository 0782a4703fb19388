package fsdelta

import (
	"errors"
	"os"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/fswalk"
	"github.com/dryexec/dryexec/wire"
)

// ownerAdds are entries with owners a guest might report: its own ids, ids of
// other users, and the overflow id a user namespace shows for unmapped ones.
func ownerAdds() []add {
	owned := func(a add, uid, gid int) add {
		a.e.UID, a.e.GID = uid, gid
		return a
	}
	chmodD := add{e: wire.FSEntry{Path: "d", Kind: wire.EntryDir, Mode: 0o700}}
	chmodB := add{e: wire.FSEntry{Path: "d/b.txt", Kind: wire.EntryFile, Mode: 0o600, Size: 4}, data: str("bee\n")}
	fifo := add{e: wire.FSEntry{Path: "fifo", Kind: wire.EntryOther, Mode: 0o640}}
	return []add{
		owned(fEntry("a.txt", "changed\n"), 0, 0),
		owned(chmodD, 65534, 65534),
		owned(chmodB, 1234, 5678),
		owned(fifo, 7, 8),
		owned(wEntry("gone"), 0, 0),
		owned(lEntry("ln", "a.txt"), 0, 65534),
		owned(dEntry("nd"), 1234, 0),
		owned(fEntry("new", "n\n"), 65534, 65534),
	}
}

// ownerChanges is what ownerAdds give, each new or changed path owned by
// owner(its entry's uid, gid); the delete has the host file's owner (the test's
// user, who made it).
//
// Unless forced (SetOwner), a chmod or modify whose owner is not the host's
// (the test's user) also names the host's owner: it is a chown.
func ownerChanges(forced bool, owner func(uid, gid int) (int, int)) []wc {
	by := func(w wc, uid, gid int) wc {
		u, g := owner(uid, gid)
		w = w.by(u, g)
		if !forced && (w.op == dryexec.OpChmod || w.op == dryexec.OpModify) && (u != os.Geteuid() || g != os.Getegid()) {
			w = w.from(os.Geteuid(), os.Getegid())
		}
		return w
	}
	return []wc{
		by(wModify("a.txt", "one\ntwo\n", "changed\n", "0644", "0644", "+changed"), 0, 0),
		by(wChmodDir("d", "0755", "0700"), 65534, 65534),
		by(wChmod("d/b.txt", "bee\n", "0644", "0600"), 1234, 5678),
		by(wc{path: "fifo", op: dryexec.OpCreate, kind: dryexec.KindOther, mode: "0640"}, 7, 8),
		wDelete("gone", "g\n", "0600"),
		by(wSymlink("ln", "a.txt"), 0, 65534),
		by(wMkdir("nd", "0755"), 1234, 0),
		by(wCreate("new", "n\n", "0644", "+n"), 65534, 65534),
	}
}

func ownerDiff(t *testing.T, setOwner bool) (string, []dryexec.FileChange) {
	lower := t.TempDir()
	buildTree(t, lower, with(file("gone", "g\n", 0o600)))
	d := NewDiffer([]Mount{{Path: lower}}, nil, diffMax)
	defer d.Close()
	if setOwner {
		d.SetOwner(4242, 4343)
	}
	for _, a := range ownerAdds() {
		if err := d.Add(&a.e, a.reader()); err != nil {
			t.Fatalf("entry %q: %v", a.e.Path, err)
		}
	}
	got, err := d.Finish()
	must(t, err)
	return lower, got
}

// Without SetOwner (as root: the guest's ids are host ids) each change carries
// its entry's owner.
func TestDifferEntryOwners(t *testing.T) {
	lower, got := ownerDiff(t, false)
	checkChanges(t, lower, got, ownerChanges(false, func(uid, gid int) (int, int) { return uid, gid }))
}

// With SetOwner (rootless: the guest's ids are its namespace's) every new or
// changed path is the given owner's, whatever the entry said; a delete keeps the
// host's owner.
func TestDifferSetOwner(t *testing.T) {
	lower, got := ownerDiff(t, true)
	checkChanges(t, lower, got, ownerChanges(true, func(int, int) (int, int) { return 4242, 4343 }))
}

// SetOwner does not make a malformed entry acceptable.
func TestDifferSetOwnerStillRefusesNegativeIDs(t *testing.T) {
	lower := t.TempDir()
	d := NewDiffer([]Mount{{Path: lower}}, nil, diffMax)
	defer d.Close()
	d.SetOwner(os.Getuid(), os.Getgid())
	for _, e := range []wire.FSEntry{
		{Path: "a", Kind: wire.EntryDir, Mode: 0o755, UID: -1},
		{Path: "b", Kind: wire.EntryDir, Mode: 0o755, GID: -1},
	} {
		var be *ErrBadEntry
		if err := d.Add(&e, nil); !errors.As(err, &be) {
			t.Errorf("entry %+v: %v, want an *ErrBadEntry", e, err)
		}
	}
}

// TestDifferChown: as root, an owner change of a host path is a change of the
// delta (a chmod naming the host's owner), never nothing: a file's alone, with
// its mode (one entry says both), a symlink's (lchown), a dir's, and with new
// content (a modify that names the host's owner).
func TestDifferChown(t *testing.T) {
	rootOrSkip(t)
	me, mg := os.Geteuid(), os.Getegid()
	cases := []ovCase{
		{
			name: "chown only",
			do:   func(f fsops) { f.chown("a.txt", 65534, mg) },
			want: []wc{wChmod("a.txt", "one\ntwo\n", "0644", "0644").by(65534, mg).from(me, mg)},
		},
		{
			name: "chgrp only",
			do:   func(f fsops) { f.chown("a.txt", me, 65534) },
			want: []wc{wChmod("a.txt", "one\ntwo\n", "0644", "0644").by(me, 65534).from(me, mg)},
		},
		{
			name: "chown and chmod",
			do:   func(f fsops) { f.chown("d/b.txt", 1234, 5678); f.chmod("d/b.txt", 0o600) },
			want: []wc{wChmod("d/b.txt", "bee\n", "0644", "0600").by(1234, 5678).from(me, mg)},
		},
		{
			name: "chown of a symlink",
			do:   func(f fsops) { f.chown("ln", 65534, 65534) },
			want: []wc{wc{path: "ln", op: dryexec.OpChmod, kind: dryexec.KindSymlink, mode: "0777", beforeMode: "0777", link: "a.txt"}.by(65534, 65534).from(me, mg)},
		},
		{
			name: "chown of a dir",
			do:   func(f fsops) { f.chown("d", 65534, 0) },
			want: []wc{wChmodDir("d", "0755", "0755").by(65534, 0).from(me, mg)},
		},
		{
			name: "chown and new content",
			do:   func(f fsops) { f.write("a.txt", "three\n"); f.chown("a.txt", 65534, 65534) },
			want: []wc{wModify("a.txt", "one\ntwo\n", "three\n", "0644", "0644", "+three").by(65534, 65534).from(me, mg)},
		},
	}
	for _, mode := range overlayModes[:2] {
		t.Run(mode.name, func(t *testing.T) {
			for _, c := range cases {
				t.Run(c.name, func(t *testing.T) {
					c.lower = with(link("ln", "a.txt"))
					runOverlayCase(t, c, mode.opts, fswalk.WalkOptions{UserXattr: mode.userXattr})
				})
			}
		})
	}
}
