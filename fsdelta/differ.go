//go:build linux || darwin

package fsdelta

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aymanbagabas/go-udiff"
	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/fswalk"
	"github.com/dryexec/dryexec/wire"
)

// Mount is one overlaid host mount as the Differ sees it.
type Mount struct {
	// Path is the absolute host path the mount's upper dir stands for.
	Path string
	// Root, when set, is what the upper dir is compared with instead of the
	// host's Path: a directory (or a detached mount, such as an image's
	// merged layers) the Differ resolves beneath exactly as it would the
	// host's (the Differ uses a duplicate; the caller keeps and closes it).
	// Path then names where it stands inside the sandbox.
	Root *os.File
}

// Differ turns a stream of untrusted upper-dir entries into FileChanges. Use one
// per trial, from one goroutine: Add each entry in the order WalkUpper produced
// it, then Finish.
type Differ struct {
	mounts  []Mount
	blobs   dryexec.BlobSink
	diffMax int64

	host    hostFS        // how host paths are opened: one name at a time, never through a symlink
	roots   []int         // search fd of each mount's host root, -1 until opened
	dirs    dirCache      // search fds of host dirs recently looked in
	noLower map[mkey]bool // dirs below which the host has nothing to compare
	opaque  []mkey        // opaque dirs with a host dir under them
	// seen holds every dir reported so far, and every other path beneath an
	// opaque or renamed dir (Finish compares those with the host's tree):
	// a million files elsewhere cost nothing here. Entries arrive in walk
	// order (check), so a path reported twice is told by last alone.
	seen    map[mkey]seen
	last    []string // per mount: the last path Add took ("" before the first)
	changes *spool
	// redirects are the dirs the overlay renamed, whose host trees Finish
	// reports as created at their new paths.
	redirects []redirect
	// links holds, for each inode with more than one link, the changes of its
	// paths: by index into changes, or (a host file that only gained a link)
	// held back until Finish knows the inode has another path in the delta.
	links     map[linkKey][]int
	linkOrder []linkKey
	heldBack  map[linkKey][]held
	// touched are the paths whose only change is their mtime (Touched).
	touched []dryexec.FileChange

	diffBytes int64 // of every Diff so far (maxDiffTotal)

	deadline time.Time // SetDeadline's
	expired  bool      // the deadline cut work short

	// hidden are host paths the sandbox saw masked or hidden (SetHidden);
	// crossed, those of them the Differ was asked to look into.
	hidden  [][]hiddenPath // by mount: the hidden paths at or beneath it
	crossed []string

	forceOwner         bool // SetOwner was called
	ownerUID, ownerGID int
}

type mkey struct {
	m int
	p string
}

// seen is what the Differ keeps of one upper path.
type seen struct {
	kind wire.EntryKind
	// merges: a dir that shows its host dir's entries beneath its own
	// (neither opaque nor redirected).
	merges bool
	// hidden: the host has nothing to compare below this path (it, or a dir
	// above it, was created, replaced or deleted by the sandbox).
	hidden bool
	// special: a dir whose entries Finish compares with the host's (see
	// record): what it holds is kept in seen.
	special bool
}

// redirect is a dir at p (of mount m) that the overlay renamed from src.
type redirect struct {
	m      int
	p, src string
}

// held is a host file that only gained a link, held back until Finish: fc
// is its change should it join a link group, touch (Path "" for none) its
// touch should it not.
type held struct {
	fc, touch dryexec.FileChange
}

// linkKey is one inode: of an upper dir (an inode number the guest reported)
// or of the host (a file shown through a renamed dir).
type linkKey struct {
	host bool
	m    int
	dev  uint64
	ino  uint64
}

// NewDiffer returns a Differ for mounts. blobs may be nil (contents are hashed but
// not kept). diffMax is the largest text file that gets a unified diff (<0: none).
func NewDiffer(mounts []Mount, blobs dryexec.BlobSink, diffMax int64) *Differ {
	d := &Differ{
		mounts: mounts, blobs: blobs, diffMax: diffMax,
		host:     newHostFS(),
		roots:    make([]int, len(mounts)),
		last:     make([]string, len(mounts)),
		noLower:  map[mkey]bool{},
		changes:  newSpool("", 0),
		seen:     map[mkey]seen{},
		links:    map[linkKey][]int{},
		heldBack: map[linkKey][]held{},
	}
	for i := range d.roots {
		d.roots[i] = -1
	}
	return d
}

// SetOwner makes uid and gid the owner of every new or changed path (create,
// modify, chmod, mkdir, symlink), whatever owner the entries report; deletes keep
// the host's owner. For a guest whose ids are not host ids: a rootless guest sees
// those of its own user namespace (what the command created shows as 0 there,
// what it cannot map as the overflow id), so the host puts the caller's in their
// place. Call it before the first Add.
func (d *Differ) SetOwner(uid, gid int) {
	d.forceOwner, d.ownerUID, d.ownerGID = true, uid, gid
}

// owner returns the owner a change made from e gets.
func (d *Differ) owner(e *wire.FSEntry) (int, int) {
	if d.forceOwner {
		return d.ownerUID, d.ownerGID
	}
	return e.UID, e.GID
}

// SetHidden names host paths (absolute, clean) that the sandbox saw masked
// or hidden: credential masks, dryexec's own state. The Differ never opens,
// lists or reads anything at or beneath them. A dir renamed or replaced
// around one (redirect_dir=on lets the kernel move a dir that holds a mount)
// would otherwise have the Differ report the host's tree beneath it, secret
// contents included; instead that part is left out and Crossed names it.
// Call it before the first Add.
func (d *Differ) SetHidden(hostPaths []string) {
	d.hidden = make([][]hiddenPath, len(d.mounts))
	for m, mt := range d.mounts {
		for _, h := range hostPaths {
			switch {
			case h == mt.Path || beneath(mt.Path, h):
				d.hidden[m] = append(d.hidden[m], hiddenPath{host: h}) // the whole mount
			case beneath(h, mt.Path):
				d.hidden[m] = append(d.hidden[m], hiddenPath{host: h, rel: strings.TrimPrefix(strings.TrimPrefix(h, mt.Path), "/")})
			}
		}
	}
}

// hiddenPath is one hidden host path, as a path relative to a mount ("":
// the mount itself), so that the check on every host lookup is a string
// comparison with no path built.
type hiddenPath struct{ host, rel string }

// beneath reports whether clean absolute path p is strictly beneath dir.
func beneath(p, dir string) bool {
	if dir == "/" {
		return p != "/"
	}
	return len(p) > len(dir) && p[len(dir)] == '/' && p[:len(dir)] == dir
}

// Crossed lists the hidden paths (SetHidden) the Differ refused to look into:
// when it is not empty, the delta does not report everything the command did
// there and must say so (StateDelta.Incomplete).
func (d *Differ) Crossed() []string { return d.crossed }

// CrossedReason says, for StateDelta.IncompleteReason, what Crossed lists;
// "" when it lists nothing.
func (d *Differ) CrossedReason() string {
	if len(d.crossed) == 0 {
		return ""
	}
	q := make([]string, len(d.crossed))
	for i, p := range d.crossed {
		q[i] = dryexec.QuotePath(p)
	}
	return "the command moved or replaced a directory holding a masked or hidden path (" + strings.Join(q, ", ") +
		"); what the host has there is not reported"
}

// isHidden reports whether mount m's path p is at or beneath a hidden path,
// and records it.
func (d *Differ) isHidden(m int, p string) bool {
	for _, h := range d.hidden[m] {
		if h.rel == "" || p == h.rel || (len(p) > len(h.rel) && p[len(h.rel)] == '/' && p[:len(h.rel)] == h.rel) {
			if len(d.crossed) < 16 && !slices.Contains(d.crossed, h.host) {
				d.crossed = append(d.crossed, h.host)
			}
			return true
		}
	}
	return false
}

// Close releases the host fds the Differ holds.
func (d *Differ) Close() {
	for i, fd := range d.roots {
		if fd >= 0 {
			unix.Close(fd)
			d.roots[i] = -1
		}
	}
	d.dirs.close()
}

// lower describes the host's state of one path.
type lower struct {
	exists bool
	kind   dryexec.Kind
	mode   uint32
	size   int64
	link   string
	uid    int
	gid    int
	mtime  int64 // ns since the epoch
	nlink  uint64
	dev    uint64
	ino    uint64
}

func (d *Differ) hostPath(m int, p string) string { return path.Join(d.mounts[m].Path, p) }

// Add takes one entry. For wire.EntryFile, content must yield exactly e.Size bytes.
func (d *Differ) Add(e *wire.FSEntry, content io.Reader) error {
	if err := d.check(e); err != nil {
		return err
	}
	d.last[e.Mount] = e.Path
	var lk *linkKey
	if e.Nlink > 1 && e.Kind != wire.EntryDir && e.Kind != wire.EntryWhiteout {
		lk = &linkKey{m: e.Mount, ino: e.Ino}
	}
	return d.record(e, content, lk)
}

// record adds checked entry e, one path of inode lk (nil: no other path).
func (d *Differ) record(e *wire.FSEntry, content io.Reader, lk *linkKey) error {
	k := mkey{e.Mount, e.Path}
	parent := d.seen[mkey{e.Mount, path.Dir(e.Path)}]
	s := seen{kind: e.Kind, hidden: parent.hidden}
	s.merges = e.Kind == wire.EntryDir && !e.Opaque && e.Redirect == ""
	keep := e.Kind == wire.EntryDir || parent.special
	if keep {
		d.seen[k] = s
	}
	n0 := len(d.changes.recs)
	if err := d.add1(e, content); err != nil {
		return err
	}
	if d.noLower[k] {
		s.hidden = true
	}
	if e.Kind == wire.EntryDir {
		// What Finish compares with the host's tree: beneath a renamed dir
		// (expand), beneath an opaque dir over a host dir (deleteUnseen),
		// and beneath a dir that merges within either. A new dir (opaque
		// too, in the upper) has no host tree beneath.
		s.special = e.Redirect != "" || (e.Opaque && !s.hidden) || (s.merges && parent.special)
	}
	if keep {
		d.seen[k] = s
	}
	// The entry's own change, if it made one, is the last (deletes of what it
	// replaced come first).
	if i := len(d.changes.recs) - 1; lk != nil && i >= n0 && d.changes.last.Op != dryexec.OpDelete && d.changes.last.Op != dryexec.OpRmdir {
		d.changes.hold(i)
		d.link(*lk, i)
	}
	return nil
}

// link records that change i is one path of inode lk.
func (d *Differ) link(lk linkKey, i int) {
	if _, ok := d.links[lk]; !ok {
		d.linkOrder = append(d.linkOrder, lk)
	}
	d.links[lk] = append(d.links[lk], i)
}

func (d *Differ) add1(e *wire.FSEntry, content io.Reader) error {
	k := mkey{e.Mount, e.Path}
	lo, err := d.lookup(e.Mount, e.Path)
	if err != nil {
		return err
	}
	hp := d.hostPath(e.Mount, e.Path)
	mode := modeString(e.Mode)
	uid, gid := d.owner(e)
	if e.Redirect != "" {
		// A dir the overlay renamed: reported as a new dir, and every path of
		// its source's host tree as created beneath it (Finish), so that commit
		// reproduces it without a rename. Whatever the host had at the new
		// path is gone.
		d.redirects = append(d.redirects, redirect{m: e.Mount, p: e.Path, src: e.Redirect})
		if lo.exists && lo.kind == dryexec.KindDir {
			// Renamed over a host dir (which the sandbox had emptied): that
			// dir stays, compared with what it now holds, and loses what the
			// new tree does not have, as an opaque dir does. Not an rmdir
			// and a mkdir of one path, which no order of the changes could
			// apply (each must come after the other's children).
			if c, ok := d.chmodOf(lo, e.Mode, dryexec.FileChange{Path: hp, Kind: dryexec.KindDir, Mode: mode, UID: uid, GID: gid, MtimeNS: e.MtimeNS}); ok {
				d.add(c)
			} else {
				d.touch(e, lo, dryexec.FileChange{Path: hp, Kind: dryexec.KindDir, Mode: mode, UID: uid, GID: gid})
			}
			d.opaque = append(d.opaque, k)
			return nil
		}
		if lo.exists {
			if err := d.deleteTree(e.Mount, e.Path, lo); err != nil {
				return err
			}
		}
		d.noLower[k] = true
		d.add(dryexec.FileChange{Path: hp, Op: dryexec.OpMkdir, Kind: dryexec.KindDir, Mode: mode, UID: uid, GID: gid, MtimeNS: e.MtimeNS})
		return nil
	}
	switch e.Kind {
	case wire.EntryWhiteout:
		// The host's tree is listed before noLower hides it from lookups.
		if lo.exists {
			if err := d.deleteTree(e.Mount, e.Path, lo); err != nil {
				return err
			}
		}
		d.noLower[k] = true
	case wire.EntryDir:
		switch {
		case !lo.exists:
			d.noLower[k] = true
			d.add(dryexec.FileChange{Path: hp, Op: dryexec.OpMkdir, Kind: dryexec.KindDir, Mode: mode, UID: uid, GID: gid, MtimeNS: e.MtimeNS})
		case lo.kind == dryexec.KindDir:
			if c, ok := d.chmodOf(lo, e.Mode, dryexec.FileChange{Path: hp, Kind: dryexec.KindDir, Mode: mode, UID: uid, GID: gid, MtimeNS: e.MtimeNS}); ok {
				d.add(c)
			} else {
				// A dir that gained or lost entries (also one made and
				// removed again: a temp file) has a new mtime and nothing
				// else; one merely copied up (its child was) keeps the
				// host's, which overlayfs preserves.
				d.touch(e, lo, dryexec.FileChange{Path: hp, Kind: dryexec.KindDir, Mode: mode, UID: uid, GID: gid})
			}
			if e.Opaque {
				d.opaque = append(d.opaque, k)
			}
		default:
			if err := d.deleteTree(e.Mount, e.Path, lo); err != nil {
				return err
			}
			d.noLower[k] = true
			d.add(dryexec.FileChange{Path: hp, Op: dryexec.OpMkdir, Kind: dryexec.KindDir, Mode: mode, UID: uid, GID: gid, MtimeNS: e.MtimeNS})
		}
	case wire.EntryFile:
		return d.addFile(e, content, lo, hp, mode, uid, gid)
	case wire.EntrySymlink:
		if lo.exists && lo.kind == dryexec.KindSymlink && lo.link == e.Link {
			fc := dryexec.FileChange{Path: hp, Kind: dryexec.KindSymlink, Mode: "0777", LinkTarget: e.Link, Size: int64(len(e.Link)), UID: uid, GID: gid}
			// A symlink's mode means nothing: only its owner (lchown) moves.
			if c, ok := d.chmodOf(lo, lo.mode, fc); ok {
				c.Mode, c.BeforeMode, c.MtimeNS = "0777", "0777", e.MtimeNS
				d.add(c)
				return nil
			}
			d.touch(e, lo, fc)
			return nil
		}
		if lo.exists {
			if err := d.deleteTree(e.Mount, e.Path, lo); err != nil {
				return err
			}
		}
		d.add(dryexec.FileChange{Path: hp, Op: dryexec.OpSymlink, Kind: dryexec.KindSymlink, Mode: "0777", LinkTarget: e.Link, Size: int64(len(e.Link)), UID: uid, GID: gid, MtimeNS: e.MtimeNS})
	case wire.EntryFIFO, wire.EntryOther:
		kind := dryexec.KindOther
		if e.Kind == wire.EntryFIFO {
			kind = dryexec.KindFIFO
		}
		if lo.exists {
			if lo.kind == kind && lo.mode == e.Mode {
				fc := dryexec.FileChange{Path: hp, Kind: kind, Mode: mode, UID: uid, GID: gid}
				if c, ok := d.chmodOf(lo, e.Mode, fc); ok { // chown of a host fifo, socket or device node
					c.MtimeNS = e.MtimeNS
					d.add(c)
					return nil
				}
				if kind == dryexec.KindFIFO { // commit makes no device node or socket: nor touches one
					d.touch(e, lo, fc)
				}
				return nil
			}
			if err := d.deleteTree(e.Mount, e.Path, lo); err != nil {
				return err
			}
		}
		d.add(dryexec.FileChange{Path: hp, Op: dryexec.OpCreate, Kind: kind, Mode: mode, UID: uid, GID: gid, MtimeNS: e.MtimeNS})
	}
	return nil
}

func (d *Differ) check(e *wire.FSEntry) error {
	bad := func(r string) error { return &ErrBadEntry{Entry: *e, Reason: r} }
	if e.Mount < 0 || e.Mount >= len(d.mounts) {
		return bad("unknown mount")
	}
	if err := wire.CheckRelPath(e.Path); err != nil {
		return bad(err.Error())
	}
	if e.Mode&^07777 != 0 {
		return bad("mode has type bits")
	}
	// Even as root, where they are host ids, the guest's ids are its report of
	// what the sandbox made: never a negative (or -1, "unchanged") id.
	if e.UID < 0 || e.GID < 0 {
		return bad("negative owner id")
	}
	switch e.Kind {
	case wire.EntryFile:
		if e.Size < 0 {
			return bad("negative size")
		}
	case wire.EntryDir, wire.EntryWhiteout, wire.EntryOther, wire.EntryFIFO:
	case wire.EntrySymlink:
		if e.Link == "" || strings.ContainsRune(e.Link, 0) {
			return bad("bad symlink target")
		}
	default:
		return bad("unknown kind")
	}
	if e.Redirect != "" {
		// Only a dir the overlay renamed has one, and the host reads its
		// source only beneath the same mount (openLower).
		if e.Kind != wire.EntryDir || e.Opaque {
			return bad("redirect on an entry that is not a merged dir")
		}
		if err := wire.CheckRelPath(e.Redirect); err != nil {
			return bad("redirect: " + err.Error())
		}
	}
	if e.Nlink > 1 && e.Ino == 0 {
		return bad("hard link without an inode number")
	}
	// Entries arrive in pre-order: a parent is reported before its children, so
	// every parent of a path must have been seen (as a directory) already.
	if dir := path.Dir(e.Path); dir != "." && d.seen[mkey{e.Mount, dir}].kind != wire.EntryDir {
		return bad("parent not reported first as a directory")
	}
	// And in the walk's order (pre-order, names sorted: changeOrder's), so
	// that a path reported twice is always the one just before.
	if last := d.last[e.Mount]; last != "" {
		switch c, nested := comparePaths(last, e.Path); {
		case c == 0 && nested == 0:
			return bad("reported twice")
		case c > 0 || nested > 0:
			return bad("out of order (the walk reports a dir before what it holds, names sorted)")
		}
	}
	return nil
}

func (d *Differ) addFile(e *wire.FSEntry, content io.Reader, lo lower, hp, mode string, uid, gid int) error {
	if content == nil {
		content = bytes.NewReader(nil)
	}
	fc := dryexec.FileChange{Path: hp, Op: dryexec.OpCreate, Kind: dryexec.KindFile, Mode: mode, Size: e.Size, UID: uid, GID: gid, MtimeNS: e.MtimeNS}
	var small *bytes.Buffer
	if d.cannotHash(e.Size) {
		// Could not be hashed in the time left even at a rate no CPU has:
		// not tried, so that the files after it still are.
		if err := discard(content, e.Size); err != nil {
			return fmt.Errorf("reading the content of %s: %w", hp, err)
		}
		fc.NotKept(fmt.Sprintf("deadline: hashing its %d bytes could not end by the trial's deadline", e.Size))
	} else if d.pastDeadline() {
		// Out of time: the file is listed, its content neither hashed nor
		// kept. Its frames are skipped (holes without making their zeros).
		if err := discard(content, e.Size); err != nil {
			return fmt.Errorf("reading the content of %s: %w", hp, err)
		}
		fc.NotKept(d.deadlineReason())
	} else {
		r := io.LimitReader(content, e.Size)
		if d.diffMax >= 0 && e.Size <= d.diffMax {
			small = new(bytes.Buffer)
			r = io.TeeReader(r, small)
		}
		// A read error is the guest stream's (or the deadline's); anything
		// else that fails the put is the store's.
		cr := &checkedReader{r: &deadlineReader{r: r, d: d}}
		sha, n, err := d.put(cr)
		var nk *dryexec.ContentNotKeptError
		switch {
		case errors.Is(cr.err, errDeadline):
			// Cut short: what was hashed is not the whole content, so no
			// hash at all; the rest of its frames is skipped.
			if err := discard(content, e.Size-n); err != nil {
				return fmt.Errorf("reading the content of %s: %w", hp, err)
			}
			sha, n, small = "", e.Size, nil
			fc.NotKept(d.deadlineReason())
		case cr.err != nil:
			return fmt.Errorf("reading the content of %s: %w", hp, cr.err)
		case errors.As(err, &nk):
			// Refused by the store (a cap, the quota, a full disk) but read
			// whole: sha and n are the content's own.
			fc.NotKept(nk.Reason)
		case err != nil:
			return &StoreError{Path: hp, Err: err}
		}
		if n != e.Size {
			return &ErrBadEntry{Entry: *e, Reason: fmt.Sprintf("content is %d bytes, entry says %d", n, e.Size)}
		}
		// The LimitReader stops at Size: make sure nothing was left behind.
		if extra, _ := io.CopyN(io.Discard, content, 1); extra != 0 {
			return &ErrBadEntry{Entry: *e, Reason: fmt.Sprintf("content is longer than the %d bytes the entry says", e.Size)}
		}
		fc.SHA256 = sha
	}
	var old []byte
	if lo.exists {
		if lo.kind != dryexec.KindFile {
			if err := d.deleteTree(e.Mount, e.Path, lo); err != nil {
				return err
			}
		} else {
			beforeSHA, oldSmall, err := d.hashLower(e.Mount, e.Path, lo.size)
			if err != nil {
				return err
			}
			fc.BeforeSHA256, fc.BeforeMode = beforeSHA, modeString(lo.mode)
			moved := d.ownerMoved(lo, uid, gid)
			if moved {
				// Commit applies the new owner (and checks the host's) with
				// the content or the mode, whichever this turns out to be.
				fc.SetBeforeOwner(lo.uid, lo.gid)
			}
			// Only two hashes taken whole say "same bytes": a hash cut
			// short by the deadline is empty.
			same := fc.SHA256 != "" && beforeSHA == fc.SHA256
			switch {
			case same && lo.mode == e.Mode && !moved:
				// Rewritten with the same bytes, or only touched: no change
				// but (where it moved) of the mtime, unless the file is now
				// one inode with another path of the delta (a hard link made
				// to it copied it up), which commit must link to it (see
				// Finish).
				tc := dryexec.FileChange{Path: hp, Kind: dryexec.KindFile, Mode: mode, Size: e.Size, SHA256: fc.SHA256, UID: uid, GID: gid}
				if e.Nlink > 1 {
					fc.Op = dryexec.OpModify
					lk := linkKey{m: e.Mount, ino: e.Ino}
					h := held{fc: fc}
					if t, ok := touchOf(e, lo, tc); ok {
						h.touch = t
					}
					d.heldBack[lk] = append(d.heldBack[lk], h)
					return nil
				}
				d.touch(e, lo, tc)
				return nil
			case same:
				fc.Op = dryexec.OpChmod
				d.add(fc)
				return nil
			}
			fc.Op, old = dryexec.OpModify, oldSmall
			if old == nil {
				small = nil // the old side is too large to diff
			}
		}
	}
	if small != nil && d.diffBytes < maxDiffTotal {
		fc.Diff = unifiedDiff(hp, old, small.Bytes(), lo.exists && lo.kind == dryexec.KindFile)
		d.diffBytes += int64(len(fc.Diff))
	}
	d.add(fc)
	return nil
}

// ownerMoved reports whether a change owned by uid, gid gives the host path lo
// another owner. Never with SetOwner: that guest's ids are not host ids (its
// user namespace maps only the caller), so it cannot chown a host path, and
// the caller's ids SetOwner puts in are no claim that it did.
func (d *Differ) ownerMoved(lo lower, uid, gid int) bool {
	return !d.forceOwner && (lo.uid != uid || lo.gid != gid)
}

// chmodOf makes fc (the path as the trial left it, mode now) a chmod of the
// host path lo when its mode or owner moved: one entry says both, the host's
// owner in BeforeUID/BeforeGID only when it moved. ok is false when neither did.
func (d *Differ) chmodOf(lo lower, now uint32, fc dryexec.FileChange) (dryexec.FileChange, bool) {
	moved := d.ownerMoved(lo, fc.UID, fc.GID)
	if lo.mode == now && !moved {
		return fc, false
	}
	fc.Op, fc.BeforeMode = dryexec.OpChmod, modeString(lo.mode)
	if moved {
		fc.SetBeforeOwner(lo.uid, lo.gid)
	}
	return fc, true
}

// maxDiffTotal bounds the diffs of one delta: past it, files get none. A
// million small text files would otherwise carry ≈ 100 MB of diffs (held in
// memory, then written), far more than anyone reads.
const maxDiffTotal = 16 << 20

// errDeadline is what a read past the Differ's deadline fails with.
var errDeadline = errors.New("past the deadline for collecting the trial's content")

// SetDeadline bounds the Differ's work on contents (hashing, storing, reading
// host files to compare): past t, a file is still listed, with its size, but
// its content is neither hashed nor kept (FileChange.NotKept), and a host
// file's hash is not taken. Hashing is CPU-bound (a 100 GiB sparse file is
// 100 GiB of zeros to hash) and must not outlast the trial's own deadline.
// The zero time means none.
func (d *Differ) SetDeadline(t time.Time) { d.deadline = t }

// Expired reports whether the deadline cut any work short: some content was
// not hashed or kept, or a host file's hash not taken.
func (d *Differ) Expired() bool { return d.expired }

func (d *Differ) pastDeadline() bool {
	if !d.expired && !d.deadline.IsZero() && time.Now().After(d.deadline) {
		d.expired = true
	}
	return d.expired
}

// maxHashRate is a sha256 rate above any CPU's (≈ 1.3–2 GB/s with SHA-NI
// here): content larger than the time left at this rate is not even tried.
const maxHashRate = 8 << 30 // bytes per second

// cannotHash reports whether n bytes cannot be hashed before the deadline.
func (d *Differ) cannotHash(n int64) bool {
	if d.deadline.IsZero() || n < maxHashRate/8 {
		return false
	}
	left := time.Until(d.deadline).Seconds()
	return left*maxHashRate < float64(n)
}

func (d *Differ) deadlineReason() string {
	return "deadline: the trial ran out of time to collect its content"
}

// deadlineReader fails with errDeadline once its Differ is past its deadline.
// It checks at every read: reads are at least tens of KiB, and a clock read
// costs tens of ns.
type deadlineReader struct {
	r io.Reader
	d *Differ
}

func (r *deadlineReader) Read(p []byte) (int, error) {
	if r.d.pastDeadline() {
		return 0, errDeadline
	}
	return r.r.Read(p)
}

// Discarder is content that can skip what is left of itself without reading
// it: a hole is not made into zeros to be thrown away.
type Discarder interface {
	Discard() error
}

// discard skips the rest of content (at most n bytes).
func discard(content io.Reader, n int64) error {
	if dc, ok := content.(Discarder); ok {
		return dc.Discard()
	}
	_, err := io.CopyN(io.Discard, content, n)
	if err == io.EOF {
		err = nil
	}
	return err
}

// checkedReader remembers its reader's error (io.EOF aside).
type checkedReader struct {
	r   io.Reader
	err error
}

func (c *checkedReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	if err != nil && err != io.EOF {
		c.err = err
	}
	return n, err
}

// put stores r in the blob sink (or only hashes it) and returns its sha256.
func (d *Differ) put(r io.Reader) (string, int64, error) {
	if d.blobs != nil {
		return d.blobs.PutBlob(r)
	}
	h := sha256.New()
	n, err := io.Copy(h, r)
	return hex.EncodeToString(h.Sum(nil)), n, err
}

func (d *Differ) add(fc dryexec.FileChange) { d.changes.add(&fc) }

// SpillTo makes the Differ keep its changes in an unlinked file in dir once
// their encodings pass spillBytes (0: 1 MiB, about 5,000 changes), instead of in memory: Finish
// then returns a FileSource (FinishDelta). Call it before the first Add.
func (d *Differ) SpillTo(dir string, spillBytes int) {
	if spillBytes <= 0 {
		spillBytes = 1 << 20
	}
	d.changes.dir, d.changes.spillBytes = dir, spillBytes
}

// touch records that entry e, at a host path whose state is lo and which fc
// describes as it is (kind, mode, owner, content or target), changed only in
// mtime, if it did.
func (d *Differ) touch(e *wire.FSEntry, lo lower, fc dryexec.FileChange) {
	if t, ok := touchOf(e, lo, fc); ok {
		d.touched = append(d.touched, t)
	}
}

// touchOf is fc as a touch when e's mtime differs from the host's and its
// owner is the host's (a path whose owner moved is not only touched; a chown
// is not in the contract, so it is left as it was).
//
// A dir only when its mtime is later than the host's: a host dir that is an
// ancestor of anything the sandbox wrote was copied up with the mtime it had
// then, and a busy one (/tmp, a home, a project someone is editing) has a
// later one by the time the trial is diffed. Reported, that stale mtime
// would be set back on the host by commit. What is lost: a trial that sets
// an existing host dir to an earlier mtime (tar -x or rsync -t into it,
// touch -d) is not reported, as before touched paths existed. A file only
// copied up keeps its mtime unless the host changes it meanwhile, when its
// content is as stale (that is a modify already).
func touchOf(e *wire.FSEntry, lo lower, fc dryexec.FileChange) (dryexec.FileChange, bool) {
	if e.MtimeNS == 0 || e.MtimeNS == lo.mtime || fc.UID != lo.uid || fc.GID != lo.gid ||
		(fc.Kind == dryexec.KindDir && e.MtimeNS < lo.mtime) {
		return dryexec.FileChange{}, false
	}
	fc.Op, fc.MtimeNS, fc.BeforeMtimeNS = dryexec.OpTouch, e.MtimeNS, lo.mtime
	return fc, true
}

// Touched returns, once Finish has run, the paths whose only change is their
// mtime (op touch, in path order): content (sha256 and size), mode, kind,
// owner and link target are the host's. They are not changes of the contract
// (Finish does not list them); commit sets their mtimes.
func (d *Differ) Touched() []dryexec.FileChange { return d.touched }

// Finish reports deletions implied by opaque dirs and the trees of renamed
// dirs, groups hard links, and returns all changes in an order they can be
// applied in (changeOrder): by path, a dir before what it holds, a deleted
// dir after what it held, and a path replaced by another kind with its delete
// (or its tree's deletes) first. The Differ takes no entries after it.
// Changes that were spilled (SpillTo) are read back into memory: FinishDelta
// leaves them where they are. The paths whose mtime alone moved are not
// changes: see Touched.
func (d *Differ) Finish() ([]dryexec.FileChange, error) {
	var sd dryexec.StateDelta
	if err := d.FinishDelta(&sd); err != nil {
		return nil, err
	}
	if err := sd.LoadFiles(); err != nil {
		return nil, err
	}
	return sd.Files, nil
}

// FinishDelta is Finish that puts the changes in sd: in sd.Files, or, when
// they were spilled, as sd's FileSource (StateDelta.SetFileSource).
func (d *Differ) FinishDelta(sd *dryexec.StateDelta) error {
	// Renamed dirs first: what they hold counts as seen for the opaque dirs.
	for _, r := range d.redirects {
		if err := d.expand(r); err != nil {
			return err
		}
	}
	done := map[mkey]bool{}
	for _, k := range d.opaque {
		if done[k] {
			continue // an opaque dir below another one, already listed with it
		}
		if err := d.deleteUnseen(k.m, k.p, done); err != nil {
			return err
		}
	}
	if err := d.groupLinks(); err != nil {
		return err
	}
	// What validated the entries is done with: for a million paths it is
	// tens of MB that the caller's later steps (policy, receipt, store)
	// need not carry.
	d.seen, d.noLower, d.opaque, d.links, d.heldBack = nil, nil, nil, nil, nil
	slices.SortFunc(d.touched, func(a, b dryexec.FileChange) int { return changeOrder(a.Path, false, b.Path, false) })
	sd.Touched = d.touched
	files, src, err := d.changes.finish()
	if err != nil {
		return err
	}
	d.changes = newSpool("", 0)
	if src != nil {
		sd.SetFileSource(src)
	} else {
		sd.Files = files
	}
	return nil
}

// groupLinks gives the changes of each inode that has more than one path in
// the delta one LinkGroup (numbered later, in the delta's order). A host file
// that only gained a link (copied up unchanged) joins the delta here, as a
// modify whose content is what it was: its identity changed, and commit must
// link the other paths to it. Paths of one inode in the upper are one file: a
// guest reporting otherwise (other content, mode, owner, time) is lying.
func (d *Differ) groupLinks() error {
	for lk, hs := range d.heldBack {
		if len(d.links[lk])+len(hs) < 2 {
			// No other path of the delta is this inode: only touched, if
			// its mtime moved.
			for _, h := range hs {
				if h.touch.Path != "" {
					d.touched = append(d.touched, h.touch)
				}
			}
			continue
		}
		if _, ok := d.links[lk]; !ok {
			d.linkOrder = append(d.linkOrder, lk)
		}
		for _, h := range hs {
			i := d.changes.add(&h.fc)
			d.changes.hold(i)
			d.links[lk] = append(d.links[lk], i)
		}
	}
	for g, lk := range d.linkOrder {
		idx := d.links[lk]
		if len(idx) < 2 {
			continue
		}
		first := d.changes.heldAt(idx[0])
		same := true
		for _, i := range idx[1:] {
			c := d.changes.heldAt(i)
			same = same && c.Kind == first.Kind && c.SHA256 == first.SHA256 && c.Size == first.Size &&
				c.LinkTarget == first.LinkTarget && c.Mode == first.Mode && c.UID == first.UID && c.GID == first.GID &&
				c.MtimeNS == first.MtimeNS
		}
		if !same {
			if lk.host {
				continue // the host changed while it was read: copies, then
			}
			return &ErrBadEntry{Entry: wire.FSEntry{Mount: lk.m, Path: strings.TrimPrefix(first.Path, d.mounts[lk.m].Path+"/"), Ino: lk.ino},
				Reason: "hard links (one inode) that differ"}
		}
		for _, i := range idx {
			d.changes.heldAt(i).LinkGroup = g + 1
		}
	}
	return nil
}

// changeOrder is the order of a delta's changes: by path, component by
// component; a dir before what it holds unless it is post (removed, or
// replacing a removed dir), then after.
func changeOrder(pa string, posta bool, pb string, postb bool) int {
	switch c, nested := comparePaths(pa, pb); {
	case nested < 0: // a is a dir b is in
		if posta {
			return 1
		}
		return -1
	case nested > 0:
		if postb {
			return -1
		}
		return 1
	default:
		return c
	}
}

// comparePaths compares a and b component by component, as
// strings.Split(p, "/") would give them. nested is -1 when a's components are
// a proper prefix of b's (a is a dir b is in), 1 when b's are of a's, and 0
// otherwise, when c says which sorts first.
func comparePaths(a, b string) (c, nested int) {
	n := min(len(a), len(b))
	for j := 0; j < n; j++ {
		if a[j] == b[j] {
			continue
		}
		switch {
		case a[j] == '/': // a's component ends first: it is a prefix of b's
			return -1, 0
		case b[j] == '/':
			return 1, 0
		case a[j] < b[j]:
			return -1, 0
		default:
			return 1, 0
		}
	}
	switch {
	case len(a) == len(b):
		return 0, 0
	case len(a) < len(b):
		if b[len(a)] == '/' {
			return 0, -1
		}
		return -1, 0
	default:
		if a[len(b)] == '/' {
			return 0, 1
		}
		return 1, 0
	}
}

// deleteUnseen deletes every host entry below dir p that the upper does not
// have: an opaque dir hides its whole host subtree. done holds the dirs already
// listed, so that none is listed twice.
func (d *Differ) deleteUnseen(m int, p string, done map[mkey]bool) error {
	// A work list, not recursion: a tree may be deeper than a stack should be.
	todo := []string{p}
	for len(todo) > 0 {
		p := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		done[mkey{m, p}] = true
		names, err := d.listLower(m, p)
		if err != nil {
			return err
		}
		for _, name := range names {
			cp := p + "/" + name
			s, ok := d.seen[mkey{m, cp}]
			if !ok {
				lo, err := d.lookup(m, cp)
				if err != nil {
					return err
				}
				if lo.exists {
					if err := d.deleteTree(m, cp, lo); err != nil {
						return err
					}
				}
				continue
			}
			// Seen in the upper: an upper dir under an opaque dir hides the
			// host's children too, so look into a host dir that is still a
			// dir above. A host dir the upper replaced with a file, symlink
			// or whiteout was listed whole when that entry was added.
			if s.kind != wire.EntryDir || d.noLower[mkey{m, cp}] || done[mkey{m, cp}] {
				continue
			}
			lo, err := d.lookup(m, cp)
			if err != nil || !lo.exists || lo.kind != dryexec.KindDir {
				continue
			}
			todo = append(todo, cp)
		}
	}
	return nil
}

// listLower lists the host dir p of mount m (nothing, when the host has no
// dir there).
func (d *Differ) listLower(m int, p string) ([]string, error) {
	fd, err := d.openLower(m, p, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil || fd < 0 {
		return nil, err
	}
	defer unix.Close(fd)
	names, err := fswalk.ReadDirNames(fd)
	if err != nil {
		return nil, fmt.Errorf("listing host dir %s: %w", d.hostPath(m, p), err)
	}
	return names, nil
}

// deleteTree records the deletion of host path p, which has state lo; for a dir,
// every file and dir beneath it is listed.
func (d *Differ) deleteTree(m int, p string, lo lower) error {
	type item struct {
		p  string
		lo lower
	}
	todo := []item{{p, lo}}
	for len(todo) > 0 {
		it := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		hp := d.hostPath(m, it.p)
		if it.lo.kind != dryexec.KindDir {
			fc := dryexec.FileChange{Path: hp, Op: dryexec.OpDelete, Kind: it.lo.kind, Mode: modeString(it.lo.mode), Size: it.lo.size,
				LinkTarget: it.lo.link, UID: it.lo.uid, GID: it.lo.gid}
			if it.lo.kind == dryexec.KindFile {
				sha, _, err := d.hashLower(m, it.p, it.lo.size)
				if err != nil {
					return err
				}
				fc.BeforeSHA256 = sha
			}
			d.add(fc)
			continue
		}
		names, err := d.listLower(m, it.p)
		if err != nil {
			return err
		}
		for _, name := range names {
			cp := it.p + "/" + name
			clo, err := d.lookup(m, cp)
			if err != nil {
				return err
			}
			if clo.exists {
				todo = append(todo, item{cp, clo})
			}
		}
		// The changes are sorted at the end (a rmdir after what the dir held).
		d.add(dryexec.FileChange{Path: hp, Op: dryexec.OpRmdir, Kind: dryexec.KindDir, Mode: modeString(it.lo.mode), UID: it.lo.uid, GID: it.lo.gid})
	}
	return nil
}

// expand reports the host tree beneath r.src, which the overlay shows at r.p
// (a renamed dir), as if the upper held it at r.p: created there (or compared
// with what the host has there, for a dir renamed over a host dir), except
// where the upper holds something itself (paths it replaced or deleted,
// opaque dirs, dirs renamed again, whose own expansion reports them).
// Contents come from the host and are kept like any new content.
func (d *Differ) expand(r redirect) error {
	type item struct{ src, p string }
	todo := []item{{r.src, r.p}}
	for len(todo) > 0 {
		it := todo[len(todo)-1]
		todo = todo[:len(todo)-1]
		names, err := d.listLower(r.m, it.src)
		if err != nil {
			return err
		}
		for _, name := range names {
			src, p := it.src+"/"+name, it.p+"/"+name
			s, inUpper := d.seen[mkey{r.m, p}]
			if inUpper && !s.merges {
				continue
			}
			lo, err := d.lookupHost(r.m, src)
			if err != nil {
				return err
			}
			if !lo.exists {
				continue
			}
			if !inUpper {
				if err := d.addFromHost(r.m, src, p, lo); err != nil {
					return err
				}
			}
			// A dir shows the host dir at src beneath what the upper holds.
			if lo.kind == dryexec.KindDir {
				todo = append(todo, item{src, p})
			}
		}
	}
	return nil
}

// addFromHost adds host path src (state lo) as an entry at p.
func (d *Differ) addFromHost(m int, src, p string, lo lower) error {
	e := &wire.FSEntry{Mount: m, Path: p, Mode: lo.mode, UID: lo.uid, GID: lo.gid, MtimeNS: lo.mtime, Link: lo.link}
	var content io.Reader
	switch lo.kind {
	case dryexec.KindDir:
		e.Kind = wire.EntryDir
	case dryexec.KindSymlink:
		e.Kind = wire.EntrySymlink
	case dryexec.KindFIFO:
		e.Kind = wire.EntryFIFO
	case dryexec.KindFile:
		e.Kind = wire.EntryFile
		fd, err := d.openLower(m, src, unix.O_RDONLY|unix.O_NOFOLLOW)
		if err != nil {
			return err
		}
		if fd < 0 {
			return nil // gone meanwhile
		}
		f := os.NewFile(uintptr(fd), d.hostPath(m, src))
		defer f.Close()
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return fmt.Errorf("stat host %s: %w", d.hostPath(m, src), err)
		}
		e.Size, content = st.Size, f
	default:
		e.Kind = wire.EntryOther
	}
	var lk *linkKey
	if lo.nlink > 1 && lo.kind != dryexec.KindDir {
		lk = &linkKey{host: true, m: m, dev: lo.dev, ino: lo.ino}
	}
	return d.record(e, content, lk)
}

// lookup returns the host's state of mount m's path p, never following a symlink
// and never leaving the mount. Paths under a dir the sandbox created, replaced or
// renamed have no host state.
func (d *Differ) lookup(m int, p string) (lower, error) {
	if d.seen[mkey{m, path.Dir(p)}].hidden {
		return lower{}, nil
	}
	return d.lookupHost(m, p)
}

// lookupHost is lookup of what the host has at p, whatever the sandbox did.
func (d *Differ) lookupHost(m int, p string) (lower, error) {
	parent, name, err := d.parentOf(m, p)
	if err != nil || parent < 0 {
		return lower{}, err
	}
	st, link, err := d.host.statAt(parent, name)
	if err != nil {
		if gone(err) {
			return lower{}, nil
		}
		return lower{}, fmt.Errorf("stat host %s: %w", d.hostPath(m, p), err)
	}
	lo := lower{exists: true, mode: uint32(st.Mode) & 07777, size: st.Size, uid: int(st.Uid), gid: int(st.Gid),
		mtime: st.Mtim.Nano(), nlink: uint64(st.Nlink), dev: uint64(st.Dev), ino: st.Ino}
	switch uint32(st.Mode) & unix.S_IFMT {
	case unix.S_IFREG:
		lo.kind = dryexec.KindFile
	case unix.S_IFDIR:
		lo.kind, lo.size = dryexec.KindDir, 0
	case unix.S_IFLNK:
		lo.kind, lo.mode, lo.link = dryexec.KindSymlink, 0777, link
	case unix.S_IFIFO:
		lo.kind, lo.size = dryexec.KindFIFO, 0
	default:
		lo.kind, lo.size = dryexec.KindOther, 0
	}
	return lo, nil
}

// openLower opens the host's p beneath mount m: no symlinks, no magic links, no
// crossing into another mount. It returns -1 (and no error) when the host has
// nothing there, or a parent on the host is a symlink or mount point.
//
// Only the last name of p goes to the kernel, relative to an fd of its parent
// dir (dirFD): p may be longer than PATH_MAX.
func (d *Differ) openLower(m int, p string, flags int) (int, error) {
	parent, name, err := d.parentOf(m, p)
	if err != nil || parent < 0 {
		return -1, err
	}
	return d.openBeneath(m, parent, name, p, flags)
}

// parentOf returns the fd of p's parent dir on the host (the Differ's:
// valid until the next lookup) and p's last name; -1 when the host has no
// dir there or p is hidden (as if the host had nothing there; Crossed says
// it did).
func (d *Differ) parentOf(m int, p string) (int, string, error) {
	if len(d.hidden) > 0 && d.isHidden(m, p) {
		return -1, "", nil
	}
	dir, name := path.Split(p)
	parent, err := d.dirFD(m, strings.TrimSuffix(dir, "/"))
	return parent, name, err
}

// gone says an open or stat found nothing the Differ may look at: no such
// name, a symlink, another filesystem, or a non-dir on the way.
func gone(err error) bool {
	return errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ELOOP) || errors.Is(err, unix.EXDEV) || errors.Is(err, unix.ENOTDIR)
}

// openBeneath opens name in host dir fd parent (p is its path in mount m, for
// errors), as openLower does.
func (d *Differ) openBeneath(m, parent int, name, p string, flags int) (int, error) {
	fd, err := d.host.openAt(parent, name, flags)
	switch {
	case err == nil:
		return fd, nil
	case gone(err):
		return -1, nil
	default:
		return -1, fmt.Errorf("opening host %s: %w", d.hostPath(m, p), err)
	}
}

// rootFD returns the search fd of mount m's host root.
func (d *Differ) rootFD(m int) (int, error) {
	if d.roots[m] < 0 && d.mounts[m].Root != nil {
		fd, err := unix.FcntlInt(d.mounts[m].Root.Fd(), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return -1, fmt.Errorf("opening the root of %s: %w", d.mounts[m].Path, err)
		}
		d.roots[m] = fd
	}
	if d.roots[m] < 0 {
		// The mount's path came from the sandbox side: never follow a symlink
		// on the way to it either.
		fd, err := d.host.openRoot(d.mounts[m].Path)
		if err != nil {
			return -1, fmt.Errorf("opening host mount %s: %w", d.mounts[m].Path, err)
		}
		d.roots[m] = fd
	}
	return d.roots[m], nil
}

// dirFD returns a search fd of host dir p ("" for the root) of mount m, or -1
// when the host has no dir there; it stays the Differ's (the caller must not
// close it) and is valid until the next call. Each dir is opened from its
// parent's fd, one name at a time, the way openLower opens anything.
func (d *Differ) dirFD(m int, p string) (int, error) {
	if p == "" {
		return d.rootFD(m)
	}
	if fd, ok := d.dirs.get(mkey{m, p}); ok {
		return fd, nil
	}
	// The nearest dir above p whose fd is at hand, then down from there.
	start, fd := 0, -1
	for i := strings.LastIndexByte(p, '/'); i > 0; i = strings.LastIndexByte(p[:i], '/') {
		if f, ok := d.dirs.get(mkey{m, p[:i]}); ok {
			start, fd = i+1, f
			break
		}
	}
	if fd < 0 {
		var err error
		if fd, err = d.rootFD(m); err != nil {
			return -1, err
		}
	}
	for start <= len(p) {
		end := strings.IndexByte(p[start:], '/')
		if end < 0 {
			end = len(p)
		} else {
			end += start
		}
		nfd, err := d.openBeneath(m, fd, p[start:end], p[:end], oSearch|unix.O_DIRECTORY)
		if err != nil || nfd < 0 {
			return -1, err
		}
		d.dirs.put(mkey{m, p[:end]}, nfd)
		fd, start = nfd, end+1
	}
	return fd, nil
}

// dirCache holds a bounded number of host dir fds, dropping the least
// recently used: the Differ looks mostly in the dirs along the current path,
// and a tree may be deeper than the fds a process may hold.
type dirCache struct {
	fds   map[mkey]dirFD
	clock uint64
}

type dirFD struct {
	fd   int
	used uint64
}

// maxDirFDs bounds the dir fds a Differ holds.
const maxDirFDs = 64

func (c *dirCache) get(k mkey) (int, bool) {
	e, ok := c.fds[k]
	if ok {
		c.clock++
		e.used = c.clock
		c.fds[k] = e
	}
	return e.fd, ok
}

func (c *dirCache) put(k mkey, fd int) {
	if c.fds == nil {
		c.fds = map[mkey]dirFD{}
	}
	if len(c.fds) >= maxDirFDs {
		var oldest mkey
		var min uint64 = ^uint64(0)
		for k, e := range c.fds {
			if e.used < min {
				oldest, min = k, e.used
			}
		}
		unix.Close(c.fds[oldest].fd)
		delete(c.fds, oldest)
	}
	c.clock++
	c.fds[k] = dirFD{fd, c.clock}
}

func (c *dirCache) close() {
	for _, e := range c.fds {
		unix.Close(e.fd)
	}
	c.fds = nil
}

// hashLower returns the sha256 of the host file, and its bytes when it is small
// enough to diff. An unreadable host file (rootless, someone else's 0600 file) has
// an empty hash rather than failing the trial.
func (d *Differ) hashLower(m int, p string, size int64) (string, []byte, error) {
	fd, err := d.openLower(m, p, unix.O_RDONLY|unix.O_NOFOLLOW)
	if err != nil {
		if errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) {
			return "", nil, nil
		}
		return "", nil, err
	}
	if fd < 0 {
		return "", nil, nil
	}
	f := os.NewFile(uintptr(fd), d.hostPath(m, p))
	defer f.Close()
	if d.cannotHash(size) {
		d.expired = true // no hash of the host's file: the delta says it is incomplete
		return "", nil, nil
	}
	h := sha256.New()
	var small *bytes.Buffer
	var w io.Writer = h
	if d.diffMax >= 0 && size <= d.diffMax {
		small = new(bytes.Buffer)
		w = io.MultiWriter(h, small)
	}
	if _, err := io.Copy(w, &deadlineReader{r: f, d: d}); err != nil {
		if errors.Is(err, errDeadline) {
			return "", nil, nil // no hash: the delta says it is incomplete
		}
		return "", nil, fmt.Errorf("reading host %s: %w", d.hostPath(m, p), err)
	}
	var b []byte
	if small != nil {
		// Non-nil even when the file is empty: nil means "too large to diff".
		b = append([]byte{}, small.Bytes()...)
	}
	return hex.EncodeToString(h.Sum(nil)), b, nil
}

func modeString(m uint32) string {
	i := int(m&07777) * 4
	return modeStrings[i : i+4]
}

// modeStrings holds the 4096 four-digit octal mode strings back to back,
// made once: a substring per change allocates nothing (one allocation per
// change was a million small objects for a million files), and one string
// made without fmt keeps package init, which every dryexec process pays
// (`dryexec --help` included), to one allocation instead of 4096 Sprintfs.
// Never written after init.
var modeStrings = func() string {
	b := make([]byte, 0, (07777+1)*4)
	for m := range 07777 + 1 {
		b = append(b, '0'+byte(m>>9&7), '0'+byte(m>>6&7), '0'+byte(m>>3&7), '0'+byte(m&7))
	}
	return string(b)
}()

// unifiedDiff returns a unified diff of old → new when both are text, else "".
func unifiedDiff(p string, old, new []byte, hadOld bool) string {
	if !isText(old) || !isText(new) {
		return ""
	}
	from := diffName("a" + p)
	if !hadOld {
		from = "/dev/null"
	}
	return udiff.Unified(from, diffName("b"+p), string(old), string(new))
}

// diffName is a name as a diff header shows it: quoted with Go's escapes, as
// git quotes it, when it holds a control character, a quote or backslash, a
// rune that does not print (bidi overrides) or bytes that are not UTF-8. The
// command picks its file names: unquoted, a newline in one wrote diff lines of
// its own into the header (TestDiffHeaderNames).
func diffName(s string) string {
	for _, r := range s {
		if r == '"' || r == '\\' || r == utf8.RuneError || !strconv.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

func isText(b []byte) bool { return utf8.Valid(b) && bytes.IndexByte(b, 0) < 0 }
