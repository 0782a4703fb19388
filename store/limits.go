package store

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/dryexec/dryexec"
)

// Limits bound what the store keeps on the host's disk. A content blob that
// would cross one is not kept: the trial still lists its file, with its size
// and sha256, marked content_kept: false with the reason
// (dryexec.ContentNotKeptError), and commit refuses that file. Bytes are
// bytes on disk: a file's holes are stored as holes and cost nothing.
type Limits struct {
	// TrialBytes caps the content one trial stores. 0: DefaultTrialBytes;
	// negative: no cap.
	TrialBytes int64
	// TotalBytes is the whole store's quota (every kept trial's blobs and
	// records). 0: DefaultTotalBytes; negative: none.
	TotalBytes int64
	// MinFreeBytes is what the store leaves free on its filesystem: content
	// that would leave less is not kept. 0: DefaultMinFreeBytes; negative:
	// none.
	MinFreeBytes int64
}

// Defaults of Limits (docs/limits.md says why).
const (
	DefaultTrialBytes   = 2 << 30
	DefaultTotalBytes   = 20 << 30
	DefaultMinFreeBytes = 1 << 30
)

// SetLimits replaces the store's limits (zero fields: the defaults). Call it
// before the first Begin.
func (s *Store) SetLimits(l Limits) { s.limits = l }

// lim returns v, def for 0, and no limit (-1) for a negative v.
func lim(v, def int64) int64 {
	switch {
	case v == 0:
		return def
	case v < 0:
		return -1
	}
	return v
}

// SetTrialCap replaces the trial's cap on stored content (0: the store's,
// negative: none). Call it before the first PutBlob.
func (t *Trial) SetTrialCap(n int64) { t.capOverride = n }

// budget is what a trial may still write: the least of what its cap, the
// store's quota and the filesystem's free space leave. It is taken at the
// first blob (a trial that writes no file costs no walk of the store) and
// counted down as blobs are written. Another process's trial storing at the
// same time is not seen: two of them can pass the quota by what each stores
// (at most their caps).
type budget struct {
	left   int64 // bytes; -1: unbounded
	reason string
}

func (t *Trial) budgetOnce() {
	if t.budgetTaken {
		return
	}
	t.budgetTaken = true
	l := t.s.limits
	t.budget = budget{left: -1}
	tighter := func(n int64, reason string) {
		if n < 0 {
			n = 0
		}
		if t.budget.left < 0 || n < t.budget.left {
			t.budget = budget{left: n, reason: reason}
		}
	}
	capN := lim(l.TrialBytes, DefaultTrialBytes)
	if t.capOverride != 0 {
		capN = lim(t.capOverride, DefaultTrialBytes)
	}
	if capN >= 0 {
		tighter(capN, fmt.Sprintf("the trial's content cap of %d bytes is reached (--content-cap, DRYEXEC_TRIAL_CONTENT_CAP)", capN))
	}
	if q := lim(l.TotalBytes, DefaultTotalBytes); q >= 0 {
		tighter(q-t.s.usage(), fmt.Sprintf("the store's quota of %d bytes is full (DRYEXEC_STORE_QUOTA; dryexec discard or gc frees it)", q))
	}
	if mf := lim(l.MinFreeBytes, DefaultMinFreeBytes); mf >= 0 {
		var st syscall.Statfs_t
		if err := syscall.Statfs(t.s.dir, &st); err == nil {
			tighter(int64(st.Bavail)*int64(st.Bsize)-mf, fmt.Sprintf("the store's disk would have less than %d bytes free (DRYEXEC_STORE_MIN_FREE)", mf))
		}
	}
}

// usage is what the store's trials take on disk now (allocated blocks, so a
// sparse blob counts what it holds).
func (s *Store) usage() int64 {
	var n int64
	filepath.WalkDir(filepath.Join(s.dir, "trials"), func(_ string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if info, err := e.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			}
		}
		return nil
	})
	return n
}

// blockSize is the granularity of holes in a stored blob: a block of zeros
// this large, at a multiple of it, is not written.
const blockSize = 4096

// PutBlob implements dryexec.BlobSink. The blob is written sparse: aligned
// blocks of zeros become holes (a `truncate -s 100G` file costs no disk). A
// blob that would pass the trial's cap, the store's quota or its free-space
// floor, or that the disk has no room for, is not kept but still read whole:
// its sha256 and length come back with a *dryexec.ContentNotKeptError.
func (t *Trial) PutBlob(r io.Reader) (string, int64, error) {
	if err := t.open(); err != nil {
		return "", 0, err
	}
	t.budgetOnce()
	if t.buf == nil {
		t.buf = make([]byte, 256<<10)
	}
	// Most files fit one buffer: hashed first, they are written straight
	// under their name, without a temporary file and a rename (half the
	// directory operations: a trial of 200,000 small files spent most of its
	// collection in them).
	m, rerr := io.ReadFull(r, t.buf)
	if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
		return t.putSmall(t.buf[:m])
	}
	if rerr != nil {
		return "", int64(m), fmt.Errorf("store: reading blob: %w", rerr)
	}
	r = io.MultiReader(bytes.NewReader(t.buf[:m:m]), r)
	dir, err := t.blobDir()
	if err != nil {
		return "", 0, err
	}
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return "", 0, fmt.Errorf("store: %w", err)
	}
	buf := make([]byte, len(t.buf)) // t.buf holds the first chunk, read again
	h := sha256.New()
	var (
		n, written int64
		notKept    string
	)
	drop := func(reason string) {
		notKept = reason
		f.Close()
		os.Remove(f.Name())
		if t.budget.left >= 0 {
			t.budget.left += written // the file is gone, and what it took
		}
	}
	for {
		m, rerr := io.ReadFull(r, buf)
		chunk := buf[:m]
		h.Write(chunk)
		if notKept == "" && m > 0 {
			w, reason, werr := t.writeSparse(f, chunk, n)
			written += w
			switch {
			case reason != "":
				drop(reason)
			case werr != nil:
				f.Close()
				os.Remove(f.Name())
				return "", n, fmt.Errorf("store: writing blob: %w", werr)
			}
		}
		n += int64(m)
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			if notKept == "" {
				f.Close()
				os.Remove(f.Name())
			}
			return "", n, fmt.Errorf("store: reading blob: %w", rerr)
		}
	}
	sha := hex.EncodeToString(h.Sum(nil))
	if notKept != "" {
		return sha, n, &dryexec.ContentNotKeptError{Reason: notKept}
	}
	// A trailing hole: the size comes from the truncate.
	err = f.Truncate(n)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", n, fmt.Errorf("store: writing blob: %w", err)
	}
	if err := os.Rename(f.Name(), filepath.Join(dir, sha)); err != nil {
		os.Remove(f.Name())
		return "", n, fmt.Errorf("store: %w", err)
	}
	return sha, n, nil
}

// putSmall stores content that is all in memory: its name is known before
// it is written, and content already stored (the same bytes twice) is not
// written again.
func (t *Trial) putSmall(b []byte) (string, int64, error) {
	sum := sha256.Sum256(b)
	sha, n := hex.EncodeToString(sum[:]), int64(len(b))
	dir, err := t.blobDir()
	if err != nil {
		return "", 0, err
	}
	p := filepath.Join(dir, sha)
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_CLOEXEC, 0o600)
	switch {
	case errors.Is(err, fs.ErrExist):
		return sha, n, nil
	case err != nil:
		return "", n, fmt.Errorf("store: %w", err)
	}
	w, reason, err := t.writeSparse(f, b, 0)
	if last := len(b) - (len(b)-1)%blockSize - 1; err == nil && reason == "" && len(b) > 0 && bytes.Equal(b[last:], zeroBlock[:len(b)-last]) {
		err = f.Truncate(n) // a trailing hole: nothing was written there
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil || reason != "" {
		// Not left half written under the name of the whole.
		os.Remove(p)
		if t.budget.left >= 0 {
			t.budget.left += w
		}
		if err != nil {
			return "", n, fmt.Errorf("store: writing blob: %w", err)
		}
		return sha, n, &dryexec.ContentNotKeptError{Reason: reason}
	}
	return sha, n, nil
}

var zeroBlock [blockSize]byte

// writeSparse writes chunk at off in f, leaving its aligned blocks of zeros
// as holes, within the trial's budget. It returns the bytes written and, when
// the chunk's data does not fit the budget or the disk, why not (nothing of
// it is then written).
func (t *Trial) writeSparse(f *os.File, chunk []byte, off int64) (int64, string, error) {
	var data int64
	for i := 0; i < len(chunk); i += blockSize {
		b := chunk[i:min(i+blockSize, len(chunk))]
		if !bytes.Equal(b, zeroBlock[:len(b)]) {
			data += int64(len(b))
		}
	}
	if t.budget.left >= 0 && data > t.budget.left {
		return 0, t.budget.reason, nil
	}
	var written int64
	for i := 0; i < len(chunk); {
		if bytes.Equal(chunk[i:min(i+blockSize, len(chunk))], zeroBlock[:min(blockSize, len(chunk)-i)]) {
			i += blockSize
			continue
		}
		j := i
		for j < len(chunk) && !bytes.Equal(chunk[j:min(j+blockSize, len(chunk))], zeroBlock[:min(blockSize, len(chunk)-j)]) {
			j += blockSize
		}
		j = min(j, len(chunk))
		w, err := f.WriteAt(chunk[i:j], off+int64(i))
		written += int64(w)
		if t.budget.left >= 0 {
			t.budget.left -= int64(w)
		}
		if err != nil {
			if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) {
				return written, "the store's disk is full", nil
			}
			return written, "", err
		}
		i = j
	}
	return written, "", nil
}
