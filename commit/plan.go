package commit

import (
	"fmt"
	"os"
	"path"
	"slices"
	"strings"

	"github.com/dryexec/dryexec"
)

type stepKind string

const (
	stepRemove stepKind = "remove" // rename the old path to Backup
	stepMkdir  stepKind = "mkdir"
	stepPlace  stepKind = "place" // Temp (new content) becomes Path
	stepChmod  stepKind = "chmod"
	// stepTouch sets Path's mtime to Mtime once the commit is applied
	// (finish), if Path is still what the trial left there: a touched path
	// (StateDelta.Touched), or a host dir whose entries the commit only
	// swapped, which gets back the mtime it had before the commit.
	stepTouch stepKind = "touch"
)

// step is one journaled action. Everything rollback needs is in it.
type step struct {
	Kind stepKind `json:"kind"`
	Path string   `json:"path"`
	Temp string   `json:"temp,omitempty"`
	// Backup is where a remove step moves the old path; on a mkdir step, the
	// backup of what stood at Path before (if anything).
	Backup string `json:"backup,omitempty"`
	// Replace: Path exists and is swapped with Temp atomically (RENAME_EXCHANGE).
	Replace bool `json:"replace,omitempty"`
	// TempIno identifies the staged temp once written, so a crashed apply can
	// tell whether Path is already the new file.
	TempIno uint64       `json:"temp_ino,omitempty"`
	FileKnd dryexec.Kind `json:"file_kind,omitempty"`
	Mode    uint32       `json:"mode"`
	OldMode uint32       `json:"old_mode,omitempty"`
	UID     int          `json:"uid"`
	GID     int          `json:"gid"`
	Link    string       `json:"link,omitempty"`
	SHA     string       `json:"sha,omitempty"`
	Size    int64        `json:"size,omitempty"`
	// InNewDir: the parent is created by this commit, so the temp is staged
	// only after that mkdir (and rolled back with it).
	InNewDir bool `json:"in_new_dir,omitempty"`
	// LinkTo is the path of the first file of this one's hard-link group:
	// the temp is a link to that content, not a copy.
	LinkTo string `json:"link_to,omitempty"`
	// LinkHost: LinkTo is a host file this commit does not write (it only
	// gained links in the trial, as with cp -al or git's local clone); the
	// temp links to it as it is, once its bytes are re-hashed.
	LinkHost bool `json:"link_host,omitempty"`
	// Mtime is the mtime (ns) the trial left, set once the content is in place.
	Mtime int64 `json:"mtime_ns,omitempty"`
	// Chown: a chmod step that also sets the owner to UID, GID (lchown,
	// before the mode: chown clears setuid and setgid); rollback sets
	// OldUID, OldGID back.
	Chown  bool `json:"chown,omitempty"`
	OldUID int  `json:"old_uid,omitempty"`
	OldGID int  `json:"old_gid,omitempty"`
}

// touchStep is the step that sets t's mtime (a touched path).
func touchStep(t dryexec.FileChange) step {
	return step{Kind: stepTouch, Path: t.Path, FileKnd: t.Kind, Mode: parseMode(t.Mode), UID: t.UID, GID: t.GID,
		SHA: t.SHA256, Size: t.Size, Link: t.LinkTarget, Mtime: t.MtimeNS}
}

// plan is the ordered steps of one commit plus what conflict checking needs.
type plan struct {
	steps   []step
	changes []dryexec.FileChange // the selected changes, for the result
	touched []dryexec.FileChange // the selected touched paths (StateDelta.Touched)
	// first is the first change at each path in delta order: it says what the
	// host must look like there now.
	first   map[string]dryexec.FileChange
	created map[string]bool // dirs this commit creates
	removed map[string]bool // paths this commit removes
	// anc memoizes ancestors(dir): a deep tree asks about the same long
	// ancestors once per path beneath them.
	anc map[string]ancestry
}

// ancestry is what a directory and its ancestors are to this commit.
type ancestry struct {
	created         bool // it or an ancestor is a directory this commit creates
	createdNotFresh bool // one of those is created without first being removed
}

// ancestors says whether dir or any of its ancestors is created by this
// commit, each path looked up once.
func (pl *plan) ancestors(dir string) ancestry {
	if dir == "/" {
		return ancestry{}
	}
	if a, ok := pl.anc[dir]; ok {
		return a
	}
	a := pl.ancestors(parentDir(dir))
	if pl.created[dir] {
		a.created = true
		a.createdNotFresh = a.createdNotFresh || !pl.removed[dir]
	}
	pl.anc[dir] = a
	return a
}

// parentDir is path.Dir of a clean absolute path, without the copy path.Dir
// makes (which, in a deep tree, costs as much as the path is long).
func parentDir(p string) string {
	i := strings.LastIndexByte(p, '/')
	if i <= 0 {
		return "/"
	}
	return p[:i]
}

// selectChanges returns the changes of d under any of paths (all when none),
// plus every mkdir of an ancestor they need, and the touched paths under any
// of paths (no touched ancestor: its mtime is the trial's after every change
// in it, selected or not).
func selectChanges(d *dryexec.StateDelta, paths []string) ([]dryexec.FileChange, []dryexec.FileChange, error) {
	for _, f := range d.Files {
		if !strings.HasPrefix(f.Path, "/") || f.Path == "/" || path.Clean(f.Path) != f.Path || strings.ContainsRune(f.Path, 0) {
			return nil, nil, fmt.Errorf("commit: trial %s holds a bad path %q", d.TrialID, f.Path)
		}
	}
	if err := checkTouched(d); err != nil {
		return nil, nil, err
	}
	if len(paths) == 0 {
		return slices.Clone(d.Files), slices.Clone(d.Touched), nil
	}
	var touched []dryexec.FileChange
	matched := make([]bool, len(paths))
	for _, t := range d.Touched {
		sel := false
		for i, p := range paths {
			if t.Path == p || strings.HasPrefix(t.Path, strings.TrimSuffix(p, "/")+"/") {
				sel, matched[i] = true, true
			}
		}
		if sel {
			touched = append(touched, t)
		}
	}
	mkdirs := map[string]bool{}
	for _, f := range d.Files {
		if f.Op == dryexec.OpMkdir {
			mkdirs[f.Path] = true
		}
	}
	want := map[string]bool{}
	for _, f := range d.Files {
		for i, p := range paths {
			if f.Path == p || strings.HasPrefix(f.Path, strings.TrimSuffix(p, "/")+"/") {
				want[f.Path] = true
				matched[i] = true
			}
		}
	}
	for i, ok := range matched {
		if !ok {
			return nil, nil, fmt.Errorf("commit: trial %s changed nothing at or under %s", d.TrialID, paths[i])
		}
	}
	// Every ancestor of a wanted path, each looked at once (a deep tree's
	// paths share thousands).
	seen := map[string]bool{}
	for p := range want {
		for a := parentDir(p); a != "/" && !seen[a]; a = parentDir(a) {
			seen[a] = true
		}
	}
	for a := range seen {
		if mkdirs[a] {
			want[a] = true
		}
	}
	var out []dryexec.FileChange
	for _, f := range d.Files {
		if want[f.Path] {
			out = append(out, f)
		}
	}
	return out, touched, nil
}

// checkTouched refuses a delta whose touched list is not what a Differ makes:
// a bad path, another op, no mtime, a kind commit cannot touch, or a path that
// also has a change.
func checkTouched(d *dryexec.StateDelta) error {
	if len(d.Touched) == 0 {
		return nil
	}
	changed := make(map[string]bool, len(d.Files))
	for _, f := range d.Files {
		changed[f.Path] = true
	}
	seen := make(map[string]bool, len(d.Touched))
	for _, t := range d.Touched {
		why := ""
		switch {
		case !strings.HasPrefix(t.Path, "/") || t.Path == "/" || path.Clean(t.Path) != t.Path || strings.ContainsRune(t.Path, 0):
			why = "a bad path"
		case t.Op != dryexec.OpTouch:
			why = fmt.Sprintf("op %q", t.Op)
		case t.MtimeNS == 0:
			why = "no mtime"
		case t.Kind != dryexec.KindFile && t.Kind != dryexec.KindDir && t.Kind != dryexec.KindSymlink && t.Kind != dryexec.KindFIFO:
			why = fmt.Sprintf("kind %q", t.Kind)
		case t.Kind == dryexec.KindFile && t.SHA256 == "":
			why = "no sha256"
		case changed[t.Path] || seen[t.Path]:
			why = "a path listed twice"
		}
		if why != "" {
			return fmt.Errorf("commit: trial %s touches %s with %s", d.TrialID, dryexec.QuotePath(t.Path), why)
		}
		seen[t.Path] = true
	}
	return nil
}

func parseMode(s string) uint32 {
	var m uint32
	fmt.Sscanf(s, "%o", &m)
	return m & 0o7777
}

func depth(p string) int { return strings.Count(p, "/") }

// sortByDepth sorts steps by the depth of their paths, shallowest first or,
// with deepest, deepest first; the depths are counted once, not per
// comparison (a deep tree's paths are long).
func sortByDepth(steps []step, deepest bool) {
	type item struct {
		d int
		s step
	}
	items := make([]item, len(steps))
	for i, s := range steps {
		items[i] = item{depth(s.Path), s}
	}
	slices.SortStableFunc(items, func(a, b item) int {
		if deepest {
			return b.d - a.d
		}
		return a.d - b.d
	})
	for i := range items {
		steps[i] = items[i].s
	}
}

// makePlan orders the steps: removals deepest first, then mkdirs shallowest
// first, then new contents, then mode changes.
func makePlan(trialID string, changes []dryexec.FileChange) (*plan, error) {
	pl := &plan{changes: changes, first: map[string]dryexec.FileChange{}, created: map[string]bool{}, removed: map[string]bool{},
		anc: map[string]ancestry{}}
	byPath := map[string][]dryexec.FileChange{}
	var order []string
	for _, f := range changes {
		if _, ok := byPath[f.Path]; !ok {
			order = append(order, f.Path)
			pl.first[f.Path] = f
		}
		byPath[f.Path] = append(byPath[f.Path], f)
	}
	tag := strings.TrimPrefix(trialID, "tr_")
	n := 0
	// A command can learn its trial id (its cgroup's path) and so create
	// these very names: a name the delta writes is skipped, else commit
	// would stage over it and fail on a delta it showed.
	name := func(p, suffix string) string {
		for {
			n++
			t := path.Join(path.Dir(p), fmt.Sprintf(".dryexec-%s-%d%s", tag, n, suffix))
			if _, ok := byPath[t]; !ok {
				return t
			}
		}
	}
	var removes, mkdirs, places, chmods []step
	groups := map[int][]int{}    // hard-link group → indexes in places
	hostLead := map[int]string{} // hard-link group → a host file it links to
	for _, p := range order {
		for _, f := range byPath[p] {
			s := step{Path: p, Mode: parseMode(f.Mode), UID: f.UID, GID: f.GID}
			if linkedOnly(f) {
				// Nothing to write: the host file stays as it is (same inode,
				// mtime and parent), and the group's new paths link to it.
				if _, ok := hostLead[f.LinkGroup]; !ok {
					hostLead[f.LinkGroup] = p
				}
				continue
			}
			switch f.Op {
			case dryexec.OpDelete, dryexec.OpRmdir:
				s.Kind, s.Backup = stepRemove, name(p, ".old")
				pl.removed[p] = true
				removes = append(removes, s)
			case dryexec.OpMkdir:
				s.Kind, s.Mtime = stepMkdir, f.MtimeNS
				pl.created[p] = true
				mkdirs = append(mkdirs, s)
			case dryexec.OpCreate, dryexec.OpModify, dryexec.OpSymlink:
				if f.Kind == dryexec.KindOther || f.Kind == dryexec.KindDir {
					return nil, fmt.Errorf("commit: cannot commit %s: a %s of kind %s", dryexec.QuotePath(p), f.Op, f.Kind)
				}
				s.Kind, s.Temp, s.FileKnd = stepPlace, name(p, ""), f.Kind
				s.Replace = f.Op == dryexec.OpModify
				s.SHA, s.Size, s.Link, s.Mtime = f.SHA256, f.Size, f.LinkTarget, f.MtimeNS
				places = append(places, s)
				// A modify too: a host file replaced by a link (ln -f a b)
				// is one inode with the group in the delta, and must be so
				// on the host, not a copy of its own.
				if f.LinkGroup != 0 && f.Kind == dryexec.KindFile {
					groups[f.LinkGroup] = append(groups[f.LinkGroup], len(places)-1)
				}
			case dryexec.OpChmod:
				s.Kind, s.OldMode, s.FileKnd = stepChmod, parseMode(f.BeforeMode), f.Kind
				if f.OwnerChanged() {
					s.Chown, s.OldUID, s.OldGID = true, *f.BeforeUID, *f.BeforeGID
				}
				if f.Kind == dryexec.KindFile && f.SHA256 != f.BeforeSHA256 && f.SHA256 != "" {
					return nil, fmt.Errorf("commit: chmod of %s also changes content", p)
				}
				chmods = append(chmods, s)
			default:
				return nil, fmt.Errorf("commit: unknown op %q at %s", f.Op, p)
			}
		}
	}
	for i := range places {
		places[i].InNewDir = pl.created[parentDir(places[i].Path)]
	}
	if err := linkGroups(places, groups, hostLead); err != nil {
		return nil, err
	}
	// A mkdir where something else stood remembers that thing's backup name:
	// rollback may only remove the directory once the old occupant is known to
	// be out of the way, i.e. its backup exists.
	backups := map[string]string{}
	for _, r := range removes {
		backups[r.Path] = r.Backup
	}
	for i := range mkdirs {
		mkdirs[i].Backup = backups[mkdirs[i].Path]
	}
	sortByDepth(removes, true)
	sortByDepth(mkdirs, false)
	pl.steps = slices.Concat(removes, mkdirs, places, chmods)
	return pl, nil
}

// linkGroups makes every written file of a hard-link group but one a link to
// that one: the first not in a directory this commit creates (so it is
// staged before anything links to it), else the first. The files of a group
// are one inode in the trial, so they must have one content.
func linkGroups(places []step, groups map[int][]int, hostLead map[int]string) error {
	for g, idx := range groups {
		if h, ok := hostLead[g]; ok {
			for _, i := range idx {
				places[i].LinkTo, places[i].LinkHost = h, true
			}
			continue
		}
		if len(idx) < 2 {
			continue
		}
		lead := idx[0]
		for _, i := range idx {
			if !places[i].InNewDir {
				lead = i
				break
			}
		}
		for _, i := range idx {
			if places[i].SHA != places[lead].SHA || places[i].Size != places[lead].Size {
				return fmt.Errorf("commit: %s and %s are one file (hard links) in the trial but have different contents",
					dryexec.QuotePath(places[lead].Path), dryexec.QuotePath(places[i].Path))
			}
			if i != lead {
				places[i].LinkTo = places[lead].Path
			}
		}
	}
	return nil
}

// linkedOnly reports whether f is a host file whose only change in the trial
// is that it gained hard links: a modify in a link group with the same
// content and mode as before.
func linkedOnly(f dryexec.FileChange) bool {
	return f.Op == dryexec.OpModify && f.Kind == dryexec.KindFile && f.LinkGroup != 0 &&
		f.SHA256 != "" && f.SHA256 == f.BeforeSHA256 && (f.BeforeMode == "" || f.BeforeMode == f.Mode)
}

// uncommittable says why commit cannot write f as the trial left it ("" when
// it can): a socket or device node, or content that was not kept.
func uncommittable(f dryexec.FileChange) string {
	if r := chownRefused(f); r != "" {
		return r
	}
	switch f.Op {
	case dryexec.OpCreate, dryexec.OpModify, dryexec.OpSymlink:
	default:
		return "" // removals and mode changes write no content
	}
	if f.Kind == dryexec.KindOther {
		return "it is a socket or a device node, which commit does not create"
	}
	if !f.Kept() {
		reason := "its content was not kept with the trial"
		if f.ContentReason != "" {
			reason += " (" + f.ContentReason + ")"
		}
		return reason
	}
	return ""
}

// chownRefused says why this process cannot give f's path the owner the trial
// left ("" when it can, or f moves no owner): only root gives a file to
// another user; anyone else may only change the group of a file that stays
// their own to a group they are in, as chgrp(1) may.
func chownRefused(f dryexec.FileChange) string {
	if !f.OwnerChanged() || os.Geteuid() == 0 {
		return ""
	}
	why := fmt.Sprintf("it changes the owner from %d:%d to %d:%d, which only root can do", *f.BeforeUID, *f.BeforeGID, f.UID, f.GID)
	if f.UID != *f.BeforeUID || f.UID != os.Geteuid() {
		return why
	}
	if f.GID == os.Getegid() {
		return ""
	}
	groups, err := os.Getgroups()
	if err != nil || !slices.Contains(groups, f.GID) {
		return fmt.Sprintf("it changes the group to %d, which this user is not in", f.GID)
	}
	return ""
}

// refuseUncommittable refuses changes commit cannot write, all named in one
// *dryexec.UncommittableError, or, with Options.SkipUncommittable, leaves
// exactly those out (each reported to Options.OnSkip).
func refuseUncommittable(trialID string, changes []dryexec.FileChange, opt Options) ([]dryexec.FileChange, error) {
	var bad []dryexec.Uncommittable
	keep := changes[:0:0]
	for _, f := range changes {
		if r := uncommittable(f); r != "" {
			bad = append(bad, dryexec.Uncommittable{Path: f.Path, Reason: r})
			continue
		}
		keep = append(keep, f)
	}
	if len(bad) == 0 {
		return changes, nil
	}
	if !opt.SkipUncommittable {
		return nil, &dryexec.UncommittableError{TrialID: trialID, Paths: bad}
	}
	if opt.OnSkip != nil {
		for _, u := range bad {
			opt.OnSkip(u)
		}
	}
	return keep, nil
}
