package fsdelta

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"

	"github.com/dryexec/dryexec"
)

// spool holds a Differ's changes as they are made: each encoded (appendChange)
// into a buffer that moves to an unlinked file in dir once it passes
// spillBytes, with only what ordering them needs (path, op) kept as Go values.
// A million small files cost ≈ 650 MB as []FileChange and ≈ 60 MB here
// (docs/limits.md, "Big deltas: memory").
type spool struct {
	dir        string // "" keeps everything in memory
	spillBytes int

	buf []byte        // the encodings, while in memory
	enc []byte        // where one encoding is made once spilled
	f   *os.File      // once spilled: unlinked, read back with ReadAt
	w   *bufio.Writer // appends to f
	off int64         // length of the encodings so far

	recs []rec
	// held are the changes kept as Go values (hard-link members: Finish
	// compares and numbers them), by their rec's offset.
	held map[int64]*dryexec.FileChange
	last dryexec.FileChange // the change add encoded last
	err  error              // the first write error: the spool is then unusable
}

// rec is one change of a spool: where its encoding is, and what sorting needs.
type rec struct {
	path string
	off  int64
	n    uint32
	// rmdir: the change is an rmdir; post: it sorts after what its path holds.
	rmdir, post bool
}

func newSpool(dir string, spillBytes int) *spool {
	return &spool{dir: dir, spillBytes: spillBytes, held: map[int64]*dryexec.FileChange{}}
}

// add appends fc and returns its index.
func (s *spool) add(fc *dryexec.FileChange) int {
	s.last = *fc
	var n int
	if s.f == nil {
		start := len(s.buf)
		s.buf = appendChange(s.buf, fc)
		n = len(s.buf) - start
		if s.dir != "" && len(s.buf) > s.spillBytes && s.err == nil {
			s.err = s.spill()
		}
	} else {
		var err error
		s.enc = appendChange(s.enc[:0], fc)
		n, err = s.w.Write(s.enc)
		if err != nil && s.err == nil {
			s.err = err
		}
	}
	s.recs = append(s.recs, rec{path: fc.Path, off: s.off, n: uint32(n), rmdir: fc.Op == dryexec.OpRmdir})
	s.off += int64(n)
	return len(s.recs) - 1
}

// spill moves the encodings to an unlinked file in s.dir: it disappears with
// the process, whatever way that ends.
func (s *spool) spill() error {
	f, err := os.CreateTemp(s.dir, ".changes-*")
	if err != nil {
		return fmt.Errorf("spilling the file changes: %w", err)
	}
	os.Remove(f.Name())
	s.f, s.w = f, bufio.NewWriterSize(f, 256<<10)
	if _, err := s.w.Write(s.buf); err != nil {
		return fmt.Errorf("spilling the file changes: %w", err)
	}
	s.buf = nil
	return nil
}

// hold keeps change i (the last added) as a Go value, for Finish to change.
func (s *spool) hold(i int) *dryexec.FileChange {
	fc := s.last
	s.held[s.recs[i].off] = &fc
	return &fc
}

// heldAt is change i if it is held, else nil.
func (s *spool) heldAt(i int) *dryexec.FileChange { return s.held[s.recs[i].off] }

// finish sorts the changes (sortRecs), numbers the link groups of the held
// changes in the order the delta lists them, and returns the changes: as a
// slice when they never left memory, else as a FileSource reading the file.
func (s *spool) finish() ([]dryexec.FileChange, dryexec.FileSource, error) {
	if s.err != nil {
		return nil, nil, s.err
	}
	if s.f != nil {
		if err := s.w.Flush(); err != nil {
			return nil, nil, fmt.Errorf("spilling the file changes: %w", err)
		}
	}
	sortRecs(s.recs)
	ids := map[int]int{}
	for _, r := range s.recs {
		if fc := s.held[r.off]; fc != nil && fc.LinkGroup != 0 {
			if ids[fc.LinkGroup] == 0 {
				ids[fc.LinkGroup] = len(ids) + 1
			}
			fc.LinkGroup = ids[fc.LinkGroup]
		}
	}
	if s.f == nil {
		out := make([]dryexec.FileChange, len(s.recs))
		for i, r := range s.recs {
			if fc := s.held[r.off]; fc != nil {
				out[i] = *fc
				continue
			}
			if err := decodeChange(s.buf[r.off:r.off+int64(r.n)], &out[i]); err != nil {
				return nil, nil, err
			}
		}
		s.buf, s.recs = nil, nil
		return out, nil, nil
	}
	// Only where each encoding is: the paths were for sorting.
	locs := make([]loc, len(s.recs))
	for i, r := range s.recs {
		locs[i] = loc{off: r.off, n: r.n}
	}
	s.recs = nil
	return nil, &spilled{f: s.f, locs: locs, held: s.held}, nil
}

// loc is where one change's encoding is in a spilled spool.
type loc struct {
	off int64
	n   uint32
}

// spilled is a Differ's changes in an unlinked file: the delta's FileSource.
type spilled struct {
	f    *os.File
	locs []loc
	held map[int64]*dryexec.FileChange
}

func (s *spilled) Len() int { return len(s.locs) }

// Each decodes one change at a time, reading ahead in the file where the
// order allows (the walk's order is nearly the delta's).
func (s *spilled) Each(fn func(*dryexec.FileChange) error) error {
	var (
		fc       dryexec.FileChange
		win      []byte // a window of the file, from winOff
		winOff   int64
		winBytes = 1 << 20
	)
	for _, l := range s.locs {
		if h := s.held[l.off]; h != nil {
			if err := fn(h); err != nil {
				return err
			}
			continue
		}
		end := l.off + int64(l.n)
		if l.off < winOff || end > winOff+int64(len(win)) {
			size := max(winBytes, int(l.n))
			if cap(win) < size {
				win = make([]byte, size)
			}
			win = win[:size]
			n, err := s.f.ReadAt(win, l.off)
			if err != nil && !(errors.Is(err, io.EOF) && n >= int(l.n)) {
				return fmt.Errorf("reading the spilled file changes: %w", err)
			}
			win, winOff = win[:n], l.off
		}
		fc = dryexec.FileChange{}
		if err := decodeChange(win[l.off-winOff:end-winOff], &fc); err != nil {
			return err
		}
		if err := fn(&fc); err != nil {
			return err
		}
	}
	return nil
}

// sortRecs is sortChanges' order over a spool's records.
func sortRecs(recs []rec) {
	rmdirs := map[string]bool{}
	for _, r := range recs {
		if r.rmdir {
			rmdirs[r.path] = true
		}
	}
	if len(rmdirs) > 0 {
		for i := range recs {
			recs[i].post = rmdirs[recs[i].path]
		}
	}
	slices.SortStableFunc(recs, func(a, b rec) int { return changeOrder(a.path, a.post, b.path, b.post) })
}

// The encoding of a FileChange in a spool: its fields in declaration order,
// strings as a uvarint length and the bytes, integers as varints, and
// ContentKept as one byte (0 nil, 1 false, 2 true). TestSpoolCodecEveryField
// fails when FileChange gains a field this does not carry.

func appendChange(b []byte, c *dryexec.FileChange) []byte {
	str := func(s string) {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	str(c.Path)
	str(string(c.Op))
	str(string(c.Kind))
	b = binary.AppendVarint(b, c.Size)
	str(c.Mode)
	str(c.SHA256)
	str(c.BeforeSHA256)
	str(c.LinkTarget)
	b = binary.AppendVarint(b, int64(c.UID))
	b = binary.AppendVarint(b, int64(c.GID))
	str(c.BeforeMode)
	// The host's owner: each id a byte (0 none, 1 set) and, if set, the id.
	for _, id := range []*int{c.BeforeUID, c.BeforeGID} {
		if id == nil {
			b = append(b, 0)
			continue
		}
		b = append(b, 1)
		b = binary.AppendVarint(b, int64(*id))
	}
	str(c.Diff)
	b = binary.AppendVarint(b, c.MtimeNS)
	b = binary.AppendVarint(b, c.BeforeMtimeNS)
	b = binary.AppendVarint(b, int64(c.LinkGroup))
	switch {
	case c.ContentKept == nil:
		b = append(b, 0)
	case *c.ContentKept:
		b = append(b, 2)
	default:
		b = append(b, 1)
	}
	str(c.ContentReason)
	return b
}

// errSpoolCorrupt: a spool's bytes are this process's own, so it means a bug
// or a disk that lost what was written.
var errSpoolCorrupt = errors.New("fsdelta: a spilled file change does not decode")

func decodeChange(b []byte, c *dryexec.FileChange) error {
	bad := false
	str := func() string {
		n, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < n {
			bad = true
			return ""
		}
		s := string(b[k : k+int(n)])
		b = b[k+int(n):]
		return s
	}
	num := func() int64 {
		v, k := binary.Varint(b)
		if k <= 0 {
			bad = true
			return 0
		}
		b = b[k:]
		return v
	}
	c.Path = str()
	c.Op = dryexec.Op(str())
	c.Kind = dryexec.Kind(str())
	c.Size = num()
	c.Mode = str()
	c.SHA256 = str()
	c.BeforeSHA256 = str()
	c.LinkTarget = str()
	c.UID = int(num())
	c.GID = int(num())
	c.BeforeMode = str()
	for _, id := range []**int{&c.BeforeUID, &c.BeforeGID} {
		*id = nil
		if len(b) == 0 {
			return errSpoolCorrupt
		}
		set := b[0] == 1
		b = b[1:]
		if set {
			v := int(num())
			*id = &v
		}
	}
	c.Diff = str()
	c.MtimeNS = num()
	c.BeforeMtimeNS = num()
	c.LinkGroup = int(num())
	if len(b) == 0 {
		return errSpoolCorrupt
	}
	switch b[0] {
	case 0:
		c.ContentKept = nil
	case 1:
		f := false
		c.ContentKept = &f
	default:
		t := true
		c.ContentKept = &t
	}
	b = b[1:]
	c.ContentReason = str()
	if bad || len(b) != 0 {
		return errSpoolCorrupt
	}
	return nil
}
