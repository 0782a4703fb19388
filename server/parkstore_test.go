package server

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dryexec/dryexec/session"
)

// testPark writes a park as ParkSession leaves it, without a VM: a saved
// state file and its record. It returns the park's directory.
func testPark(t *testing.T, store, id string, expires time.Time, edit func(*parkRecord)) string {
	t.Helper()
	dir := filepath.Join(parkedRoot(store), id)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "vm.state"), []byte("saved state"), 0o600); err != nil {
		t.Fatal(err)
	}
	files, n := parkFiles(dir)
	at := expires.Add(-time.Hour)
	rec := &parkRecord{Version: parkRecordVersion,
		ParkedInfo: ParkedInfo{SessionID: id, Rung: "vm", Workspace: "/workspace", Created: at.Add(-time.Minute), Parked: at, Expires: expires, Bytes: n},
		Files:      files, Objects: map[string][]string{"db": {"query"}},
		Session: session.ParkRecord{Rung: "vm", Workspace: "/workspace", Allow: map[string][]string{"db": {"query"}},
			Cache: []session.ParkedCacheItem{{Key: "k", Value: []byte("v")}}}}
	if edit != nil {
		edit(rec)
	}
	if err := writeParkRecord(dir, rec); err != nil {
		t.Fatal(err)
	}
	return dir
}

// deadPID is a pid whose process has ended.
func deadPID(t *testing.T) int {
	t.Helper()
	c := exec.Command("true")
	if err := c.Run(); err != nil {
		t.Fatal(err)
	}
	return c.Process.Pid
}

func exists(p string) bool { _, err := os.Lstat(p); return err == nil }

// gc removes expired and damaged parks and what an interrupted park or
// resume left, names each with why, keeps a good park, a live daemon's
// work in progress and what is not a park, and removes nothing outside
// parked/: not through a record naming a file elsewhere, a park that is a
// symlink, or a saved state that is one.
func TestGCParks(t *testing.T) {
	store := t.TempDir()
	victim := t.TempDir()
	victimFile := filepath.Join(victim, "precious")
	if err := os.WriteFile(victimFile, []byte("saved state"), 0o600); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	later := now.Add(time.Hour)
	id := func(c byte) string { return "se_" + strings.Repeat(string(c), 20) }
	good := testPark(t, store, id('a'), later, nil)
	expired := testPark(t, store, id('b'), now.Add(-time.Second), nil)
	missing := testPark(t, store, id('c'), later, nil)
	os.Remove(filepath.Join(missing, "vm.state"))
	short := testPark(t, store, id('d'), later, nil)
	os.Truncate(filepath.Join(short, "vm.state"), 3)
	norecord := testPark(t, store, id('e'), later, nil)
	os.Remove(filepath.Join(norecord, parkRecordFile))
	elsewhere := testPark(t, store, id('f'), later, func(r *parkRecord) {
		rel, err := filepath.Rel(filepath.Join(parkedRoot(store), id('f')), victimFile)
		if err != nil {
			t.Fatal(err)
		}
		r.Files = map[string]int64{rel: 11}
	})
	linkedState := testPark(t, store, id('g'), later, nil)
	os.Remove(filepath.Join(linkedState, "vm.state"))
	if err := os.Symlink(victimFile, filepath.Join(linkedState, "vm.state")); err != nil {
		t.Fatal(err)
	}
	// A park that is a symlink to a directory holding a valid park.
	vpark := testPark(t, victim, id('h'), now.Add(-time.Second), nil)
	linkedPark := filepath.Join(parkedRoot(store), id('h'))
	if err := os.Symlink(vpark, linkedPark); err != nil {
		t.Fatal(err)
	}
	torn := testPark(t, store, id('i'), later, nil)
	if err := os.WriteFile(filepath.Join(torn, parkRecordFile), []byte(`{"version":1,"session_id":`), 0o600); err != nil {
		t.Fatal(err)
	}
	dead := deadPID(t)
	interrupted := filepath.Join(parkedRoot(store), parkingPrefix+id('j')+"-"+itoa(dead))
	resumed := filepath.Join(parkedRoot(store), resumingPrefix+id('k')+"-"+itoa(dead))
	// pid 1 lives: another daemon's park in progress.
	inProgress := filepath.Join(parkedRoot(store), parkingPrefix+id('l')+"-1")
	other := filepath.Join(parkedRoot(store), "notes")
	for _, d := range []string{interrupted, resumed, inProgress, other} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}

	removed, err := GCParks(store, now)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range removed {
		got[r.SessionID] = r.Reason
	}
	want := map[string]string{id('b'): "expired", id('c'): "vm.state", id('d'): "bytes", id('e'): "no record",
		id('f'): "not a file name", id('g'): "regular file", id('h'): "not a park directory", id('i'): "does not parse",
		id('j'): "park interrupted", id('k'): "resume interrupted"}
	for k, w := range want {
		if !strings.Contains(got[k], w) {
			t.Errorf("%s: removed for %q, want a reason with %q", k, got[k], w)
		}
	}
	if len(got) != len(want) {
		t.Errorf("removed %v, want %d parks", got, len(want))
	}
	for _, p := range []string{expired, missing, short, norecord, elsewhere, linkedState, linkedPark, torn, interrupted, resumed} {
		if exists(p) {
			t.Errorf("%s survived gc", p)
		}
	}
	for _, p := range []string{good, inProgress, other, victimFile, vpark, filepath.Join(vpark, "vm.state")} {
		if !exists(p) {
			t.Errorf("%s was removed", p)
		}
	}
	if b, _ := os.ReadFile(victimFile); string(b) != "saved state" {
		t.Errorf("the file outside parked/: %q", b)
	}
}

// A parked/ that is a symlink is refused whole: gc removes nothing through
// it.
func TestGCParksRootSymlink(t *testing.T) {
	store, victim := t.TempDir(), t.TempDir()
	p := testPark(t, victim, "se_"+strings.Repeat("a", 20), time.Now().Add(-time.Hour), nil)
	if err := os.Symlink(filepath.Dir(p), parkedRoot(store)); err != nil {
		t.Fatal(err)
	}
	if _, err := GCParks(store, time.Now()); err == nil {
		t.Fatal("gc went through a parked/ symlink")
	}
	if !exists(filepath.Join(p, "vm.state")) {
		t.Fatal("gc removed what parked/ points to")
	}
}

// A later daemon lists an earlier daemon's park and reports a damaged one;
// it refuses to resume the damaged one (ErrParkDamaged), which stays for
// gc, and does not list or take a park another running daemon holds.
func TestParksOfEarlierDaemon(t *testing.T) {
	store := t.TempDir()
	later := time.Now().Add(time.Hour)
	goodID, badID, heldID := "se_"+strings.Repeat("a", 20), "se_"+strings.Repeat("b", 20), "se_"+strings.Repeat("c", 20)
	testPark(t, store, goodID, later, func(r *parkRecord) { r.Owner = deadPID(t) })
	bad := testPark(t, store, badID, later, nil)
	os.Truncate(filepath.Join(bad, "vm.state"), 1)
	testPark(t, store, heldID, later, func(r *parkRecord) { r.Owner = 1 })
	svc, err := NewService(Config{StoreDir: store})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	parked, damaged := svc.Parks()
	if len(parked) != 1 || parked[0].SessionID != goodID || parked[0].Expires.Sub(later).Abs() > time.Second {
		t.Errorf("parked: %+v", parked)
	}
	if len(damaged) != 1 || damaged[0].SessionID != badID || !strings.Contains(damaged[0].Reason, "bytes") {
		t.Errorf("damaged: %+v", damaged)
	}
	if _, err := svc.ResumeSession(context.Background(), badID); !errors.Is(err, ErrParkDamaged) {
		t.Errorf("resuming a damaged park: %v", err)
	}
	if !exists(filepath.Join(bad, "vm.state")) {
		t.Error("a refused resume removed the damaged park: gc's to report and remove")
	}
	if _, err := svc.ResumeSession(context.Background(), heldID); !errors.Is(err, ErrSessionNotFound) {
		t.Errorf("resuming another daemon's park: %v", err)
	}
	if !exists(svc.parkDir(heldID)) {
		t.Error("another daemon's park was taken")
	}
	if got := svc.Sessions(); len(got) != 0 {
		t.Errorf("sessions after refused resumes: %+v", got)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

// A record tampered to name a rung that cannot resume a park (its rung and
// its session's both) is damaged: the resume is refused before it spends
// the saved state, which stays for gc.
func TestParkTamperedRung(t *testing.T) {
	store := t.TempDir()
	id := "se_" + strings.Repeat("t", 20)
	dir := testPark(t, store, id, time.Now().Add(time.Hour), func(r *parkRecord) {
		r.Rung, r.Session.Rung = "ns", "ns"
	})
	svc, err := NewService(Config{StoreDir: store})
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Close()
	if _, damaged := svc.Parks(); len(damaged) != 1 || damaged[0].SessionID != id {
		t.Errorf("damaged: %+v", damaged)
	}
	if _, err := svc.ResumeSession(context.Background(), id); !errors.Is(err, ErrParkDamaged) {
		t.Errorf("resuming a park whose record names rung ns: %v", err)
	}
	if !exists(filepath.Join(dir, "vm.state")) {
		t.Error("a refused resume spent the saved state")
	}
}

// gc of parks whose saved state or record is a hard link to a file outside
// parked/, or a FIFO, removes the park's names only: the outside file keeps
// its bytes, and gc opens no FIFO (it would block).
func TestGCParksLinksAndFIFOs(t *testing.T) {
	store, victim := t.TempDir(), t.TempDir()
	victimFile := filepath.Join(victim, "precious")
	if err := os.WriteFile(victimFile, []byte("saved state"), 0o600); err != nil {
		t.Fatal(err)
	}
	id := func(c byte) string { return "se_" + strings.Repeat(string(c), 20) }
	past := time.Now().Add(-time.Second)
	// An expired park whose saved state is the outside file, by a hard
	// link of the recorded size: a valid park, to be removed as expired.
	linked := testPark(t, store, id('a'), past, nil)
	state := filepath.Join(linked, "vm.state")
	os.Remove(state)
	if err := os.Link(victimFile, state); err != nil {
		t.Skipf("no hard link across the test's temp dirs: %v", err)
	}
	fifoState := testPark(t, store, id('b'), time.Now().Add(time.Hour), nil)
	os.Remove(filepath.Join(fifoState, "vm.state"))
	if err := syscall.Mkfifo(filepath.Join(fifoState, "vm.state"), 0o600); err != nil {
		t.Fatal(err)
	}
	fifoRecord := testPark(t, store, id('c'), time.Now().Add(time.Hour), nil)
	os.Remove(filepath.Join(fifoRecord, parkRecordFile))
	if err := syscall.Mkfifo(filepath.Join(fifoRecord, parkRecordFile), 0o600); err != nil {
		t.Fatal(err)
	}
	removed, err := GCParks(store, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range removed {
		got[r.SessionID] = r.Reason
	}
	for k, w := range map[string]string{id('a'): "expired", id('b'): "regular file", id('c'): "regular file"} {
		if !strings.Contains(got[k], w) {
			t.Errorf("%s: removed for %q, want a reason with %q", k, got[k], w)
		}
	}
	for _, p := range []string{linked, fifoState, fifoRecord} {
		if exists(p) {
			t.Errorf("%s survived gc", p)
		}
	}
	if b, err := os.ReadFile(victimFile); err != nil || string(b) != "saved state" {
		t.Errorf("the file outside parked/: %q, %v", b, err)
	}
}
