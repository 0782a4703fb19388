package linuxns

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/store"
)

// storedTrial runs argv in dir with r, recording into a fresh store with
// limits lim, saves it, and returns the delta and the store.
func storedTrial(t *testing.T, r *Rung, lim store.Limits, timeout time.Duration, dir string, argv ...string) (*dryexec.StateDelta, *store.Store) {
	t.Helper()
	s, err := store.Open(t.TempDir(), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	s.SetLimits(lim)
	id := dryexec.NewTrialID()
	rec, err := s.Begin(id)
	if err != nil {
		t.Fatal(err)
	}
	spec := dryexec.TrialSpec{TrialID: id, Blobs: rec,
		Action: dryexec.Action{Argv: argv, Cwd: dir, Env: testPath, TimeoutMS: timeout.Milliseconds()}}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	d, err := r.Trial(ctx, spec)
	if err != nil {
		rec.Abort()
		t.Fatalf("trial %q: %v", argv, err)
	}
	validate(t, d)
	if err := rec.Save(d); err != nil {
		t.Fatal(err)
	}
	return d, s
}

// onDisk is what a directory tree takes on disk.
func onDisk(t *testing.T, root string) int64 {
	t.Helper()
	var n int64
	filepath.WalkDir(root, func(_ string, e fs.DirEntry, err error) error {
		if err == nil {
			if info, err := e.Info(); err == nil {
				n += info.Sys().(*syscall.Stat_t).Blocks * 512
			}
		}
		return nil
	})
	return n
}

// zeroSHA is the sha256 of n zeros with data written at off.
func zeroSHA(n, off int64, data string) string {
	h := sha256.New()
	buf := make([]byte, 1<<20)
	for done := int64(0); done < n; {
		k := min(int64(len(buf)), n-done)
		chunk := buf[:k]
		clear(chunk)
		if off >= done && off < done+k {
			copy(chunk[off-done:], data)
		}
		h.Write(chunk)
		done += k
	}
	return hex.EncodeToString(h.Sum(nil))
}

func byName(t *testing.T, d *dryexec.StateDelta, dir string) map[string]dryexec.FileChange {
	t.Helper()
	m := map[string]dryexec.FileChange{}
	for _, f := range d.Files {
		m[strings.TrimPrefix(f.Path, dir+"/")] = f
	}
	return m
}

// TestSparseTrial: sparse files cost the store what they hold, not their
// size: a 256 MiB file with 4 bytes of data is kept, with the sha256 of all
// its bytes, in a blob of a few KiB on disk; a 100 GiB one (hashing its zeros
// would take longer than the trial has) is listed with its size, not kept,
// and costs the store nothing. The files after it are still hashed and
// kept: it did not use up the trial's time.
func TestSparseTrial(t *testing.T) {
	requireNS(t)
	dir := t.TempDir()
	const size, off = 256 << 20, 128 << 20
	d, s := storedTrial(t, &Rung{}, store.Limits{}, 10*time.Second, dir, "sh", "-c",
		`truncate -s 100G a_huge && truncate -s 256M b_sparse && printf data | dd of=b_sparse bs=1 seek=134217728 conv=notrunc status=none && echo small > c_small`)
	if d.Process.ExitCode != 0 {
		t.Fatalf("exit %d: %s", d.Process.ExitCode, d.Process.Stderr)
	}
	files := byName(t, d, dir)
	huge, sparse, small := files["a_huge"], files["b_sparse"], files["c_small"]
	if huge.Size != 100<<30 || huge.Kept() || !strings.Contains(huge.ContentReason, "deadline") || huge.SHA256 != "" {
		t.Errorf("a_huge: %+v, want listed with its size, not kept (deadline)", huge)
	}
	if sparse.Size != size || !sparse.Kept() || sparse.SHA256 != zeroSHA(size, off, "data") {
		t.Errorf("b_sparse: %+v, want kept with the sha256 of its 256 MiB", sparse)
	}
	if !small.Kept() || small.SHA256 != sha256hex([]byte("small\n")) {
		t.Errorf("c_small: %+v, want kept", small)
	}
	if d.Incomplete {
		t.Errorf("incomplete: %s", d.IncompleteReason)
	}
	if n := onDisk(t, filepath.Join(s.Dir(), "trials")); n > 1<<20 {
		t.Errorf("the store takes %d bytes on disk, want less than 1 MiB", n)
	}
	if n := onDisk(t, s.BlobPath(d.TrialID, sparse.SHA256)); n > 64<<10 {
		t.Errorf("the sparse file's blob takes %d bytes on disk", n)
	}
}

// TestHugeSparseWithinDeadline: a file of 2^63-1 bytes (the largest there is)
// with --timeout 5s is not hashed at all: the file after it is kept, and the
// delta is complete. Before, the host hashed its zeros for as long as it was
// let (past 40 s).
func TestHugeSparseWithinDeadline(t *testing.T) {
	requireNS(t)
	dir := t.TempDir()
	d, _ := storedTrial(t, &Rung{}, store.Limits{}, 5*time.Second, dir, "sh", "-c",
		`truncate -s 9223372036854775807 a_huge && echo after > b_after`)
	files := byName(t, d, dir)
	if a := files["a_huge"]; a.Size != 1<<63-1 || a.Kept() || !strings.Contains(a.ContentReason, "deadline") {
		t.Errorf("a_huge: %+v", a)
	}
	if b := files["b_after"]; !b.Kept() || b.SHA256 != sha256hex([]byte("after\n")) {
		t.Errorf("b_after: %+v, want hashed and kept", b)
	}
	if d.Incomplete {
		t.Errorf("incomplete: %s", d.IncompleteReason)
	}
}

// TestCollectDeadlinePasses: content that can be tried but not hashed in the
// time the trial has left (4 GiB of zeros in 1 s: no CPU hashes that fast)
// is cut off at the deadline. It and every file after it are listed, with
// their sizes, not kept, and the delta says it is incomplete, with why —
// unless the command left too little time to try it at all (below).
func TestCollectDeadlinePasses(t *testing.T) {
	requireNS(t)
	dir := t.TempDir()
	d, s := storedTrial(t, &Rung{CollectMin: time.Millisecond}, store.Limits{}, time.Second, dir, "sh", "-c",
		`truncate -s 4G a_big && echo after > b_after`)
	files := byName(t, d, dir)
	if f := files["a_big"]; f.Size != 4<<30 || f.Kept() || f.SHA256 != "" || !strings.Contains(f.ContentReason, "deadline") {
		t.Errorf("a_big: %+v, want listed with its size, not kept (deadline)", f)
	}
	// Which way a_big ends decides b_after's fate, and that depends on how
	// much of the deadline the command left (a loaded machine leaves less):
	// with over half a second left, a_big's hashing runs out the clock, so
	// b_after is listed but not hashed and the delta is incomplete; with
	// less, a_big is not even tried (as TestHugeSparseWithinDeadline), so
	// b_after still is and the delta is complete. Both are true deltas.
	b := files["b_after"]
	ranOut := b.SHA256 == ""
	switch {
	case b.Size != 6:
		t.Errorf("b_after: %+v, want its size", b)
	case ranOut && (b.Kept() || !strings.Contains(b.ContentReason, "deadline")):
		t.Errorf("b_after: %+v, not hashed, want not kept with the deadline as its reason", b)
	case !ranOut && (!b.Kept() || b.SHA256 != sha256hex([]byte("after\n"))):
		t.Errorf("b_after: %+v, want hashed and kept", b)
	}
	if d.Incomplete != ranOut || (ranOut && !strings.Contains(d.IncompleteReason, "ran out of time")) {
		t.Errorf("b_after hashed %v, incomplete %v %q", !ranOut, d.Incomplete, d.IncompleteReason)
	}
	if n := onDisk(t, filepath.Join(s.Dir(), "trials")); n > 1<<20 {
		t.Errorf("the store takes %d bytes on disk", n)
	}
}

// TestContentLimitsInATrial: past the trial's content cap, or the store's
// quota, a file is still listed, with its size and the sha256 of its whole
// content, but not kept, with the reason; its blob is not in the store.
// What fits is kept.
func TestContentLimitsInATrial(t *testing.T) {
	requireNS(t)
	tests := []struct {
		name   string
		lim    store.Limits
		reason string
	}{
		{"trial cap", store.Limits{TrialBytes: 1 << 20}, "content cap"},
		{"store quota", store.Limits{TotalBytes: 1 << 20}, "quota"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			d, s := storedTrial(t, &Rung{}, tt.lim, 0, dir, "sh", "-c",
				`head -c 600000 /dev/zero | tr '\0' a > a; head -c 600000 /dev/zero | tr '\0' b > b; echo c > c`)
			files := byName(t, d, dir)
			want := map[string]struct {
				content string
				kept    bool
			}{
				"a": {strings.Repeat("a", 600000), true},
				"b": {strings.Repeat("b", 600000), false},
				"c": {"c\n", true},
			}
			for name, w := range want {
				f := files[name]
				if f.Kept() != w.kept || f.SHA256 != sha256hex([]byte(w.content)) || f.Size != int64(len(w.content)) {
					t.Errorf("%s: %+v, want kept %v with the content's sha256", name, f, w.kept)
				}
				if !w.kept && !strings.Contains(f.ContentReason, tt.reason) {
					t.Errorf("%s: reason %q, want %q", name, f.ContentReason, tt.reason)
				}
				_, err := os.Stat(s.BlobPath(d.TrialID, f.SHA256))
				if (err == nil) != w.kept {
					t.Errorf("%s: blob stored: %v, want %v", name, err == nil, w.kept)
				}
			}
			if d.Incomplete {
				t.Errorf("incomplete: %s", d.IncompleteReason)
			}
		})
	}
}

// TestCollectDeadline: content is collected until the end of the timeout, but
// never for less than half the timeout (at least CollectMin) after the
// command; without a timeout, for CollectTimeout after it.
func TestCollectDeadline(t *testing.T) {
	start := time.Unix(1000, 0)
	s := func(d time.Duration) time.Time { return start.Add(d) }
	tests := []struct {
		name    string
		r       *Rung
		timeout time.Duration
		end     time.Duration // the command's, after start
		want    time.Duration // after start
	}{
		{"fast command, short timeout: CollectMin", &Rung{}, 5 * time.Second, 10 * time.Millisecond, 5*time.Second + 10*time.Millisecond},
		{"fast command, timeout past CollectMin", &Rung{}, 20 * time.Second, 10 * time.Millisecond, 20 * time.Second},
		{"command used its timeout", &Rung{}, 5 * time.Second, 5 * time.Second, 10 * time.Second},
		{"long timeout used up: half of it", &Rung{}, time.Minute, time.Minute, 90 * time.Second},
		{"long timeout, fast command", &Rung{}, time.Minute, time.Second, time.Minute},
		{"own minimum", &Rung{CollectMin: 20 * time.Second}, 10 * time.Second, 9 * time.Second, 29 * time.Second},
		{"no timeout", &Rung{}, 0, 3 * time.Second, 3*time.Second + DefaultCollectTimeout},
		{"no timeout, own", &Rung{CollectTimeout: time.Second}, 0, 3 * time.Second, 4 * time.Second},
	}
	for _, tt := range tests {
		a := dryexec.Action{TimeoutMS: tt.timeout.Milliseconds()}
		if got := tt.r.collectDeadline(a, start, s(tt.end)); !got.Equal(s(tt.want)) {
			t.Errorf("%s: deadline %v after the start, want %v", tt.name, got.Sub(start), tt.want)
		}
	}
}
