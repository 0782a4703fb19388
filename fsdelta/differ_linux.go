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
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aymanbagabas/go-udiff"
	"golang.org/x/sys/unix"

	"github.com/dryexec/dryexec"
)

// Mount is one overlaid host mount as the Differ sees it.
type Mount struct {
	// Path is the absolute host path the mount's upper dir stands for.
	Path string
}

// Differ turns a stream of untrusted upper-dir entries into FileChanges. Use one
// per trial, from one goroutine: Add each entry in the order WalkUpper produced
// it, then Finish.
type Differ struct {
	mounts  []Mount
	blobs   dryexec.BlobSink
	diffMax int64

	roots   []int              // O_PATH fd of each mount's host root, -1 until opened
	noLower map[mkey]bool      // dirs below which the host has nothing to compare
	opaque  []mkey             // opaque dirs with a host dir under them
	seen    map[mkey]EntryKind // every upper path reported so far
	changes []dryexec.FileChange

	diffBytes int64 // of every Diff so far (maxDiffTotal)

	deadline time.Time // SetDeadline's
	expired  bool      // the deadline cut work short

	forceOwner         bool // SetOwner was called
	ownerUID, ownerGID int
}

type mkey struct {
	m int
	p string
}

// NewDiffer returns a Differ for mounts. blobs may be nil (contents are hashed but
// not kept). diffMax is the largest text file that gets a unified diff (<0: none).
func NewDiffer(mounts []Mount, blobs dryexec.BlobSink, diffMax int64) *Differ {
	d := &Differ{
		mounts: mounts, blobs: blobs, diffMax: diffMax,
		roots:   make([]int, len(mounts)),
		noLower: map[mkey]bool{},
		seen:    map[mkey]EntryKind{},
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
func (d *Differ) owner(e *Entry) (int, int) {
	if d.forceOwner {
		return d.ownerUID, d.ownerGID
	}
	return e.UID, e.GID
}

// Close releases the host fds the Differ holds.
func (d *Differ) Close() {
	for i, fd := range d.roots {
		if fd >= 0 {
			unix.Close(fd)
			d.roots[i] = -1
		}
	}
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
}

func (d *Differ) hostPath(m int, p string) string { return path.Join(d.mounts[m].Path, p) }

// Add takes one entry. For EntryFile, content must yield exactly e.Size bytes.
func (d *Differ) Add(e *Entry, content io.Reader) error {
	if err := d.check(e); err != nil {
		return err
	}
	k := mkey{e.Mount, e.Path}
	d.seen[k] = e.Kind
	lo, err := d.lookup(e.Mount, e.Path)
	if err != nil {
		return err
	}
	hp := d.hostPath(e.Mount, e.Path)
	mode := modeString(e.Mode)
	uid, gid := d.owner(e)
	switch e.Kind {
	case EntryWhiteout:
		// The host's tree is listed before noLower hides it from lookups.
		if lo.exists {
			if err := d.deleteTree(e.Mount, e.Path, lo); err != nil {
				return err
			}
		}
		d.noLower[k] = true
	case EntryDir:
		switch {
		case !lo.exists:
			d.noLower[k] = true
			d.add(dryexec.FileChange{Path: hp, Op: dryexec.OpMkdir, Kind: dryexec.KindDir, Mode: mode, UID: uid, GID: gid})
		case lo.kind == dryexec.KindDir:
			if lo.mode != e.Mode {
				d.add(dryexec.FileChange{Path: hp, Op: dryexec.OpChmod, Kind: dryexec.KindDir, Mode: mode, BeforeMode: modeString(lo.mode), UID: uid, GID: gid})
			}
			if e.Opaque {
				d.opaque = append(d.opaque, k)
			}
		default:
			if err := d.deleteTree(e.Mount, e.Path, lo); err != nil {
				return err
			}
			d.noLower[k] = true
			d.add(dryexec.FileChange{Path: hp, Op: dryexec.OpMkdir, Kind: dryexec.KindDir, Mode: mode, UID: uid, GID: gid})
		}
	case EntryFile:
		return d.addFile(e, content, lo, hp, mode, uid, gid)
	case EntrySymlink:
		if lo.exists && lo.kind == dryexec.KindSymlink && lo.link == e.Link {
			return nil
		}
		if lo.exists {
			if err := d.deleteTree(e.Mount, e.Path, lo); err != nil {
				return err
			}
		}
		d.add(dryexec.FileChange{Path: hp, Op: dryexec.OpSymlink, Kind: dryexec.KindSymlink, Mode: "0777", LinkTarget: e.Link, Size: int64(len(e.Link)), UID: uid, GID: gid})
	case EntryOther:
		if lo.exists {
			if lo.kind == dryexec.KindOther && lo.mode == e.Mode {
				return nil
			}
			if err := d.deleteTree(e.Mount, e.Path, lo); err != nil {
				return err
			}
		}
		d.add(dryexec.FileChange{Path: hp, Op: dryexec.OpCreate, Kind: dryexec.KindOther, Mode: mode, UID: uid, GID: gid})
	}
	return nil
}

func (d *Differ) check(e *Entry) error {
	bad := func(r string) error { return &ErrBadEntry{Entry: *e, Reason: r} }
	if e.Mount < 0 || e.Mount >= len(d.mounts) {
		return bad("unknown mount")
	}
	if err := CheckRelPath(e.Path); err != nil {
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
	case EntryFile:
		if e.Size < 0 {
			return bad("negative size")
		}
	case EntryDir, EntryWhiteout, EntryOther:
	case EntrySymlink:
		if e.Link == "" || strings.ContainsRune(e.Link, 0) {
			return bad("bad symlink target")
		}
	default:
		return bad("unknown kind")
	}
	// Entries arrive in pre-order: a parent is reported before its children, so
	// every parent of a path must have been seen (as a directory) already.
	if dir := path.Dir(e.Path); dir != "." && d.seen[mkey{e.Mount, dir}] != EntryDir {
		return bad("parent not reported first as a directory")
	}
	if _, dup := d.seen[mkey{e.Mount, e.Path}]; dup {
		return bad("reported twice")
	}
	return nil
}

func (d *Differ) addFile(e *Entry, content io.Reader, lo lower, hp, mode string, uid, gid int) error {
	if content == nil {
		content = bytes.NewReader(nil)
	}
	fc := dryexec.FileChange{Path: hp, Op: dryexec.OpCreate, Kind: dryexec.KindFile, Mode: mode, Size: e.Size, UID: uid, GID: gid}
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
			// Only two hashes taken whole say "same bytes": a hash cut
			// short by the deadline is empty.
			same := fc.SHA256 != "" && beforeSHA == fc.SHA256
			switch {
			case same && lo.mode == e.Mode:
				return nil // rewritten with the same bytes, or only touched
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

func (d *Differ) add(fc dryexec.FileChange) { d.changes = append(d.changes, fc) }

// Finish reports deletions implied by opaque dirs and returns all changes in an
// order they can be applied in (see sortChanges): by path, a dir before what it
// holds, a deleted dir after what it held, and a path replaced by another kind
// with its delete (or its tree's deletes) first. The Differ takes no entries
// after it.
func (d *Differ) Finish() ([]dryexec.FileChange, error) {
	done := map[mkey]bool{}
	for _, k := range d.opaque {
		if done[k] {
			continue // an opaque dir below another one, already listed with it
		}
		fd, err := d.openLower(k.m, k.p, unix.O_RDONLY|unix.O_DIRECTORY)
		if err != nil {
			return nil, err
		}
		if fd < 0 {
			continue
		}
		err = d.deleteUnseen(k.m, k.p, fd, done)
		unix.Close(fd)
		if err != nil {
			return nil, err
		}
	}
	out := d.changes
	// What validated the entries is done with: for a million paths it is
	// tens of MB that the caller's later steps (policy, receipt, store)
	// need not carry.
	d.changes, d.seen, d.noLower, d.opaque = nil, nil, nil, nil
	sortChanges(out)
	return out, nil
}

// sortChanges puts changes in the order they can be applied in: by path, compared
// component by component, each dir before what it holds, except that a removed
// dir (rmdir) comes after everything it held, and so does whatever replaced it.
// Changes to the same path keep the order they were made in: a path replaced by
// another kind has its delete (or rmdir) first.
//
// It sorts indices and then moves each change once, in place: a copy of a
// million changes (and of their split paths) cost hundreds of MB.
func sortChanges(changes []dryexec.FileChange) {
	rmdirs := map[string]bool{}
	for _, fc := range changes {
		if fc.Op == dryexec.OpRmdir {
			rmdirs[fc.Path] = true
		}
	}
	post := make([]bool, len(changes)) // sorts after every path below it
	idx := make([]int, len(changes))
	for i := range changes {
		idx[i], post[i] = i, len(rmdirs) > 0 && rmdirs[changes[i].Path]
	}
	slices.SortStableFunc(idx, func(a, b int) int {
		switch c, nested := comparePaths(changes[a].Path, changes[b].Path); {
		case nested < 0: // a is a dir b is in
			if post[a] {
				return 1
			}
			return -1
		case nested > 0:
			if post[b] {
				return -1
			}
			return 1
		default:
			return c
		}
	})
	// changes[j] becomes changes[idx[j]], one cycle of the permutation at a time.
	for i := range idx {
		if idx[i] < 0 {
			continue
		}
		tmp := changes[i]
		for j := i; ; {
			k := idx[j]
			idx[j] = -1
			if k == i {
				changes[j] = tmp
				break
			}
			changes[j] = changes[k]
			j = k
		}
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

// deleteUnseen deletes every host entry below dir p (open as dirfd) that the upper
// does not have: an opaque dir hides its whole host subtree. done holds the dirs
// already listed, so that none is listed twice.
func (d *Differ) deleteUnseen(m int, p string, dirfd int, done map[mkey]bool) error {
	done[mkey{m, p}] = true
	names, err := readDirNames(dirfd)
	if err != nil {
		return fmt.Errorf("listing host dir %s: %w", d.hostPath(m, p), err)
	}
	for _, name := range names {
		cp := p + "/" + name
		if _, ok := d.seen[mkey{m, cp}]; !ok {
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
		// Seen in the upper: an upper dir under an opaque dir hides the host's
		// children too, so recurse into a host dir that is still a dir above. A
		// host dir the upper replaced with a file, symlink or whiteout was listed
		// whole when that entry was added.
		if d.seen[mkey{m, cp}] != EntryDir || d.noLower[mkey{m, cp}] || done[mkey{m, cp}] {
			continue
		}
		lo, err := d.lookup(m, cp)
		if err != nil || !lo.exists || lo.kind != dryexec.KindDir {
			continue
		}
		cfd, err := unix.Openat(dirfd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		err = d.deleteUnseen(m, cp, cfd, done)
		unix.Close(cfd)
		if err != nil {
			return err
		}
	}
	return nil
}

// deleteTree records the deletion of host path p, which has state lo; for a dir,
// every file and dir beneath it is listed, children first.
func (d *Differ) deleteTree(m int, p string, lo lower) error {
	hp := d.hostPath(m, p)
	if lo.kind != dryexec.KindDir {
		fc := dryexec.FileChange{Path: hp, Op: dryexec.OpDelete, Kind: lo.kind, Mode: modeString(lo.mode), Size: lo.size, LinkTarget: lo.link,
			UID: lo.uid, GID: lo.gid}
		if lo.kind == dryexec.KindFile {
			sha, _, err := d.hashLower(m, p, lo.size)
			if err != nil {
				return err
			}
			fc.BeforeSHA256 = sha
		}
		d.add(fc)
		return nil
	}
	fd, err := d.openLower(m, p, unix.O_RDONLY|unix.O_DIRECTORY)
	if err != nil {
		return err
	}
	if fd >= 0 {
		names, err := readDirNames(fd)
		unix.Close(fd)
		if err != nil {
			return fmt.Errorf("listing host dir %s: %w", hp, err)
		}
		for _, name := range names {
			cp := p + "/" + name
			clo, err := d.lookup(m, cp)
			if err != nil {
				return err
			}
			if clo.exists {
				if err := d.deleteTree(m, cp, clo); err != nil {
					return err
				}
			}
		}
	}
	d.add(dryexec.FileChange{Path: hp, Op: dryexec.OpRmdir, Kind: dryexec.KindDir, Mode: modeString(lo.mode), UID: lo.uid, GID: lo.gid})
	return nil
}

// lookup returns the host's state of mount m's path p, never following a symlink
// and never leaving the mount. Paths under a dir the sandbox created or replaced
// have no host state.
func (d *Differ) lookup(m int, p string) (lower, error) {
	for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
		if d.noLower[mkey{m, dir}] {
			return lower{}, nil
		}
	}
	fd, err := d.openLower(m, p, unix.O_PATH|unix.O_NOFOLLOW)
	if err != nil || fd < 0 {
		return lower{}, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return lower{}, fmt.Errorf("stat host %s: %w", d.hostPath(m, p), err)
	}
	lo := lower{exists: true, mode: st.Mode & 07777, size: st.Size, uid: int(st.Uid), gid: int(st.Gid)}
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFREG:
		lo.kind = dryexec.KindFile
	case unix.S_IFDIR:
		lo.kind, lo.size = dryexec.KindDir, 0
	case unix.S_IFLNK:
		lo.kind, lo.mode = dryexec.KindSymlink, 0777
		buf := make([]byte, unix.PathMax)
		n, err := unix.Readlinkat(fd, "", buf)
		if err != nil {
			return lower{}, fmt.Errorf("readlink host %s: %w", d.hostPath(m, p), err)
		}
		lo.link = string(buf[:n])
	default:
		lo.kind, lo.size = dryexec.KindOther, 0
	}
	return lo, nil
}

// openLower opens the host's p beneath mount m with openat2: no symlinks, no
// magic links, no crossing into another mount. It returns -1 (and no error) when
// the host has nothing there, or a parent on the host is a symlink or mount point.
func (d *Differ) openLower(m int, p string, flags int) (int, error) {
	if d.roots[m] < 0 {
		// The mount's path came from the sandbox side: never follow a symlink
		// on the way to it either.
		fd, err := unix.Openat2(unix.AT_FDCWD, d.mounts[m].Path, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
		if err != nil {
			return -1, fmt.Errorf("opening host mount %s: %w", d.mounts[m].Path, err)
		}
		d.roots[m] = fd
	}
	fd, err := unix.Openat2(d.roots[m], p, &unix.OpenHow{
		Flags:   uint64(flags | unix.O_CLOEXEC),
		Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_XDEV | unix.RESOLVE_NO_MAGICLINKS,
	})
	switch {
	case err == nil:
		return fd, nil
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.ELOOP), errors.Is(err, unix.EXDEV), errors.Is(err, unix.ENOTDIR):
		return -1, nil
	default:
		return -1, fmt.Errorf("opening host %s: %w", d.hostPath(m, p), err)
	}
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

func readDirNames(fd int) ([]string, error) {
	nfd, err := unix.Dup(fd)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(nfd), "")
	defer f.Close()
	names, err := f.Readdirnames(-1)
	slices.Sort(names)
	return names, err
}

func modeString(m uint32) string { return modeStrings[m&07777] }

// modeStrings are the 4096 mode strings, made once: one allocation per
// change (twice for a modify) was a million small objects for a million
// files. Never written after init.
var modeStrings = func() (t [07777 + 1]string) {
	for m := range t {
		t[m] = fmt.Sprintf("%04o", m)
	}
	return t
}()

// unifiedDiff returns a unified diff of old → new when both are text, else "".
func unifiedDiff(p string, old, new []byte, hadOld bool) string {
	if !isText(old) || !isText(new) {
		return ""
	}
	from := "a" + p
	if !hadOld {
		from = "/dev/null"
	}
	return udiff.Unified(from, "b"+p, string(old), string(new))
}

func isText(b []byte) bool { return utf8.Valid(b) && bytes.IndexByte(b, 0) < 0 }
