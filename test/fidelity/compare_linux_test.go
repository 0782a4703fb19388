package fidelity

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/dryexec/dryexec"
)

// diff is one way a trial's result differs from the native run.
type diff struct {
	class  string // what differs: "missing after commit", "mtime", "delta missing", …
	path   string // tree-relative, or "" for the process
	detail string
}

func (d diff) String() string {
	if d.path == "" {
		return d.class + ": " + d.detail
	}
	return fmt.Sprintf("%s: %s: %s", d.class, dryexec.QuotePath(d.path), d.detail)
}

// window is when a run happened (wall clock, ns since the epoch).
type window struct{ start, end int64 }

// has reports whether t is within w. w.start is the kernel's file clock when
// the run started (harness.startAfter), so a file the run wrote has an mtime
// at or after it even though that clock lags time.Now.
func (w window) has(t int64) bool { return t >= w.start && t <= w.end }

func (w window) String() string {
	return fmt.Sprintf("%s..%s", fmtTime(w.start), fmtTime(w.end))
}

func fmtTime(ns int64) string { return time.Unix(0, ns).UTC().Format("15:04:05.000000000") }

// comparison holds what every check of one workload needs: the scans, when
// the native run and the trial happened, and the ignore rules that apply.
type comparison struct {
	rules  []ignoreRule
	before tree // the template's copy before the native run (equal to the trial's)
	native tree // after the native run
	nWin   window
	tWin   window
}

func (c *comparison) ignored(p string, a aspect) bool {
	for _, r := range c.rules {
		if r.path != "" && (r.aspect == a || r.aspect == skipAll) && r.matches(p) {
			return true
		}
	}
	return false
}

func (c *comparison) skip(p string) bool { return c.ignored(p, skipAll) }

// runTime reports whether the native run set p's mtime to the moment it wrote
// p (a wall-clock time no trial can reproduce), rather than keeping the
// template's or setting a fixed one (tar, touch -d, rsync -t, a rename).
func (c *comparison) runTime(p string) bool {
	a := c.native[p]
	if a == nil {
		return false
	}
	if b := c.before[p]; b != nil && b.mtime == a.mtime {
		return false
	}
	return c.nWin.has(a.mtime)
}

// trees compares the natively changed tree with the committed one (b).
func (c *comparison) trees(committed tree) []diff {
	var out []diff
	for _, p := range unionKeys(c.native, committed) {
		if c.skip(p) {
			continue
		}
		a, b := c.native[p], committed[p]
		switch {
		case a == nil:
			out = append(out, diff{"only after commit", p, describe(b)})
			continue
		case b == nil:
			out = append(out, diff{"missing after commit", p, "natively " + describe(a)})
			continue
		case a.kind != b.kind:
			out = append(out, diff{"kind", p, fmt.Sprintf("natively %s, after commit %s", describe(a), describe(b))})
			continue
		}
		if a.mode != b.mode {
			out = append(out, diff{"mode", p, fmt.Sprintf("%04o natively, %04o after commit", a.mode, b.mode)})
		}
		if a.uid != b.uid || a.gid != b.gid {
			out = append(out, diff{"owner", p, fmt.Sprintf("%d:%d natively, %d:%d after commit", a.uid, a.gid, b.uid, b.gid)})
		}
		switch a.kind {
		case dryexec.KindFile:
			if c.ignored(p, skipContent) {
				break
			}
			if a.pyc != nil && b.pyc != nil && a.pyc.flags == 0 && b.pyc.flags == 0 {
				// A timestamp pyc records its source's mtime, which is the
				// moment the run wrote the source: what must hold is that each
				// pyc is valid for its own tree's source and the code is equal.
				if a.pyc.bodySHA != b.pyc.bodySHA {
					out = append(out, diff{"content", p, "the compiled code differs"})
				} else if why := committed.pycStale(p); why != "" && c.native.pycStale(p) == "" {
					out = append(out, diff{"stale pyc", p, "valid natively; after commit it " + why + ": python would recompile it"})
				}
				break
			}
			if a.sha != b.sha {
				out = append(out, diff{"content", p, fmt.Sprintf("natively %d bytes sha %.12s, after commit %d bytes sha %.12s %s",
					a.size, a.sha, b.size, b.sha, firstDifference(a.small, b.small))})
			}
		case dryexec.KindSymlink:
			if a.target != b.target {
				out = append(out, diff{"symlink target", p, fmt.Sprintf("%s natively, %s after commit", dryexec.QuotePath(a.target), dryexec.QuotePath(b.target))})
			}
		}
		if d := c.mtime(p, a, b); d != "" {
			out = append(out, diff{"mtime", p, d})
		}
	}
	return append(out, c.links(c.native.linkGroups(c.skip), committed.linkGroups(c.skip), "after commit")...)
}

// mtime compares p's mtime natively (a) and after commit (b): exactly where
// the native run's mtime is deterministic; within the trial's run where the
// native run stamped it with the moment of writing (commit must keep the
// trial's mtime, not stamp its own). A directory's run-time mtime is not
// compared (see ignored).
func (c *comparison) mtime(p string, a, b *entry) string {
	if c.ignored(p, skipMtime) {
		return ""
	}
	if !c.runTime(p) {
		if a.mtime != b.mtime {
			return fmt.Sprintf("%s natively (not written at run time), %s after commit", fmtTime(a.mtime), fmtTime(b.mtime))
		}
		return ""
	}
	if a.kind == dryexec.KindDir || c.tWin.has(b.mtime) {
		return ""
	}
	if old := c.before[p]; old != nil && old.mtime == b.mtime {
		return "written at run time natively; after commit it still has the template's mtime (the trial's write was not committed)"
	}
	if b.mtime > c.tWin.end {
		return fmt.Sprintf("written at run time natively; after commit %s, %.3f s after the trial ended (%s): commit's own time, not the trial's",
			fmtTime(b.mtime), float64(b.mtime-c.tWin.end)/1e9, fmtTime(c.tWin.end))
	}
	return fmt.Sprintf("written at run time natively; after commit %s, outside the trial's run %s", fmtTime(b.mtime), c.tWin)
}

// links compares two trees' hard-link groups, one diff per group.
func (c *comparison) links(ga, gb map[string][]string, where string) []diff {
	var out []diff
	seen := map[string]bool{}
	for _, p := range unionKeys(ga, gb) {
		a, b := ga[p], gb[p]
		if slices.Equal(a, b) {
			continue
		}
		key := strings.Join(a, "\x00") + "\x01" + strings.Join(b, "\x00")
		if seen[key] {
			continue
		}
		seen[key] = true
		out = append(out, diff{"hard links", p, fmt.Sprintf("natively one inode with %s; %s with %s", quoteList(a), where, quoteList(b))})
	}
	return out
}

func quoteList(ps []string) string {
	if len(ps) == 0 {
		return "nothing else"
	}
	q := make([]string, len(ps))
	for i, p := range ps {
		q[i] = dryexec.QuotePath(p)
	}
	return "{" + strings.Join(q, ", ") + "}"
}

// nativeChanges lists the paths the native run changed: created, deleted, or
// changed in kind, mode, owner, content, target, or (not directories) mtime.
// A directory's mtime moves with its entries and is not a change of its own.
func (c *comparison) nativeChanges() map[string]bool {
	out := map[string]bool{}
	for _, p := range unionKeys(c.before, c.native) {
		a, b := c.before[p], c.native[p]
		switch {
		case c.skip(p):
		case a == nil || b == nil || a.kind != b.kind || a.mode != b.mode || a.uid != b.uid || a.gid != b.gid ||
			a.sha != b.sha || a.target != b.target:
			out[p] = true
		case a.kind != dryexec.KindDir && a.mtime != b.mtime:
			out[p] = true
		}
	}
	return out
}

// delta compares the trial's delta with what the native run changed (a).
// root is the tree's absolute path; the delta's paths are absolute.
func (c *comparison) delta(d *dryexec.StateDelta, root string) []diff {
	var out []diff
	if d.Incomplete {
		out = append(out, diff{"delta incomplete", "", d.IncompleteReason})
	}
	// The delta's last word on each path: present (the change that made it)
	// or absent (deleted). A type swap is a delete and a create.
	final := map[string]*dryexec.FileChange{}
	deleted := map[string]bool{}
	for i := range d.Files {
		f := &d.Files[i]
		rel, ok := strings.CutPrefix(f.Path, root+"/")
		if !ok {
			out = append(out, diff{"delta outside the tree", f.Path, fmt.Sprintf("%s %s", f.Op, f.Kind)})
			continue
		}
		if f.Op == dryexec.OpDelete || f.Op == dryexec.OpRmdir {
			deleted[rel] = true
		} else {
			final[rel] = f
		}
	}
	// Paths whose mtime alone moved (touch, identical bytes rewritten, a
	// dir whose entries came and went): compared like changes.
	touched := map[string]*dryexec.FileChange{}
	for i := range d.Touched {
		f := &d.Touched[i]
		rel, ok := strings.CutPrefix(f.Path, root+"/")
		if !ok {
			out = append(out, diff{"delta outside the tree", f.Path, fmt.Sprintf("%s %s", f.Op, f.Kind)})
			continue
		}
		touched[rel] = f
	}
	changed := c.nativeChanges()
	paths := map[string]bool{}
	for p := range changed {
		paths[p] = true
	}
	for p := range final {
		paths[p] = true
	}
	for p := range deleted {
		paths[p] = true
	}
	for p := range touched {
		paths[p] = true
	}
	for _, p := range sortedKeys(paths) {
		if c.skip(p) {
			continue
		}
		f, inDelta := final[p], final[p] != nil || deleted[p]
		if t := touched[p]; t != nil {
			f, inDelta = t, true
		}
		a := c.native[p]
		switch {
		case !changed[p] && f != nil && f.Op == dryexec.OpTouch && a != nil && a.kind == dryexec.KindDir &&
			c.before[p] != nil && c.before[p].mtime != a.mtime:
			// A dir whose mtime moved natively too (its entries changed),
			// which nativeChanges does not count as a change of its own.
			out = append(out, c.change(p, a, f)...)
			continue
		case !changed[p]:
			// A host file that only gained hard links (cp -al, git's local
			// clone) is in the delta as a modify with the same content, in
			// the link group of its new names, so that commit can link them
			// to it: the native file's link count grew and nothing else.
			if f != nil && a != nil && c.before[p] != nil && linkedOnly(f, a, c.before[p]) {
				continue
			}
			if f != nil {
				out = append(out, diff{"delta extra", p, fmt.Sprintf("%s %s, natively unchanged (%s)", f.Op, f.Kind, describe(a))})
			} else {
				out = append(out, diff{"delta extra", p, "delete, natively " + describe(a)})
			}
			continue
		case !inDelta:
			if b := c.before[p]; a != nil && b != nil && describe(a) == describe(b) && a.uid == b.uid && a.gid == b.gid {
				out = append(out, diff{"delta missing", p, fmt.Sprintf("natively rewritten with the same content (mtime %s → %s); the delta has no entry",
					fmtTime(b.mtime), fmtTime(a.mtime))})
			} else {
				out = append(out, diff{"delta missing", p, fmt.Sprintf("natively %s → %s", describe(c.before[p]), describe(a))})
			}
			continue
		case a == nil && f != nil:
			out = append(out, diff{"delta state", p, fmt.Sprintf("natively deleted; the delta says %s %s", f.Op, f.Kind)})
			continue
		case a == nil:
			continue
		case f == nil:
			out = append(out, diff{"delta state", p, "natively " + describe(a) + "; the delta deletes it"})
			continue
		}
		out = append(out, c.change(p, a, f)...)
	}
	return append(out, c.deltaLinks(final)...)
}

// change compares one path's native state a with the delta's change f.
func (c *comparison) change(p string, a *entry, f *dryexec.FileChange) []diff {
	var out []diff
	if f.Kind != a.kind {
		return []diff{{"delta state", p, fmt.Sprintf("natively %s; the delta says %s %s", describe(a), f.Op, f.Kind)}}
	}
	if m, err := strconv.ParseUint(f.Mode, 8, 32); err != nil || uint32(m) != a.mode {
		out = append(out, diff{"delta mode", p, fmt.Sprintf("%04o natively, %q in the delta", a.mode, f.Mode)})
	}
	if f.UID != a.uid || f.GID != a.gid {
		out = append(out, diff{"delta owner", p, fmt.Sprintf("%d:%d natively, %d:%d in the delta", a.uid, a.gid, f.UID, f.GID)})
	}
	switch a.kind {
	case dryexec.KindFile:
		pycRunTime := a.pyc != nil && a.pyc.flags == 0 && c.runTime(pycSource(p))
		if !c.ignored(p, skipContent) && !pycRunTime && (f.SHA256 != a.sha || f.Size != a.size) {
			out = append(out, diff{"delta content", p, fmt.Sprintf("natively %d bytes sha %.12s, the delta %d bytes sha %.12s", a.size, a.sha, f.Size, f.SHA256)})
		}
		if !f.Kept() {
			out = append(out, diff{"delta content", p, "not kept: " + f.ContentReason})
		}
	case dryexec.KindSymlink:
		if f.LinkTarget != a.target {
			out = append(out, diff{"delta target", p, fmt.Sprintf("%s natively, %s in the delta", dryexec.QuotePath(a.target), dryexec.QuotePath(f.LinkTarget))})
		}
	}
	if c.ignored(p, skipMtime) {
		return out
	}
	switch {
	case !c.runTime(p):
		// A chmod (or a directory's change) that leaves the mtime as it was
		// needs none in the delta: commit does not touch it.
		old := c.before[p]
		kept := f.MtimeNS == 0 && old != nil && old.mtime == a.mtime && (f.Op == dryexec.OpChmod || a.kind == dryexec.KindDir)
		if f.MtimeNS != a.mtime && !kept {
			out = append(out, diff{"delta mtime", p, fmt.Sprintf("%s natively (not written at run time), %s in the delta", fmtTime(a.mtime), deltaTime(f.MtimeNS))})
		}
	case a.kind == dryexec.KindDir:
	case f.MtimeNS == 0:
		out = append(out, diff{"delta mtime", p, "written at run time natively; the delta carries no mtime"})
	case !c.tWin.has(f.MtimeNS):
		out = append(out, diff{"delta mtime", p, fmt.Sprintf("written at run time natively; the delta has %s, outside the trial's run %s", fmtTime(f.MtimeNS), c.tWin)})
	}
	return out
}

func deltaTime(ns int64) string {
	if ns == 0 {
		return "no mtime"
	}
	return fmtTime(ns)
}

// deltaLinks checks the delta's link groups against the native tree's hard
// links, for the files the delta holds.
func (c *comparison) deltaLinks(final map[string]*dryexec.FileChange) []diff {
	native := c.native.linkGroups(c.skip)
	byGroup := map[int][]string{}
	for p, f := range final {
		if f.LinkGroup != 0 && !c.skip(p) {
			byGroup[f.LinkGroup] = append(byGroup[f.LinkGroup], p)
		}
	}
	delta := map[string][]string{}
	for _, ps := range byGroup {
		sort.Strings(ps)
		for _, p := range ps {
			delta[p] = ps
		}
	}
	// Only files the delta holds can be compared: a native group is expected
	// whole in the delta when any of its members changed.
	want := map[string][]string{}
	for p, g := range native {
		if f := final[p]; f != nil && f.Kind == dryexec.KindFile {
			want[p] = g
		}
	}
	return c.links(want, delta, "the delta groups it")
}

// output compares the native run's exit code and output with the trial's.
func output(rules []ignoreRule, what string, nCode int, nOut, nErr string, tCode int, tOut, tErr string) []diff {
	var out []diff
	if nCode != tCode {
		out = append(out, diff{what + " exit code", "", fmt.Sprintf("%d natively, %d in the trial", nCode, tCode)})
	}
	for _, s := range []struct{ name, a, b string }{{"stdout", nOut, tOut}, {"stderr", nErr, tErr}} {
		a, b := normalize(rules, s.a), normalize(rules, s.b)
		if a != b {
			out = append(out, diff{what + " " + s.name, "", firstDifference([]byte(a), []byte(b))})
		}
	}
	return out
}

// normalize replaces what the output rules ignore.
func normalize(rules []ignoreRule, s string) string {
	for _, r := range rules {
		if r.output != "" {
			s = regexp.MustCompile(r.output).ReplaceAllString(s, "<ignored>")
		}
	}
	return s
}

func unionKeys[V any](a, b map[string]V) []string {
	m := map[string]bool{}
	for k := range a {
		m[k] = true
	}
	for k := range b {
		m[k] = true
	}
	return sortedKeys(m)
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// identical compares two scans strictly (every field but inode numbers, which
// only matter as hard-link groups): for the harness's own checks that two
// copies of a template are the same tree and that a trial left the host alone.
func identical(a, b tree) []diff {
	var out []diff
	for _, p := range unionKeys(a, b) {
		x, y := a[p], b[p]
		switch {
		case x == nil || y == nil || x.kind != y.kind || x.mode != y.mode || x.uid != y.uid || x.gid != y.gid ||
			x.sha != y.sha || x.target != y.target || x.size != y.size:
			out = append(out, diff{"changed", p, describe(x) + " / " + describe(y)})
		case x.mtime != y.mtime:
			out = append(out, diff{"mtime", p, fmtTime(x.mtime) + " / " + fmtTime(y.mtime)})
		}
	}
	c := &comparison{}
	return append(out, c.links(a.linkGroups(c.skip), b.linkGroups(c.skip), "then")...)
}

// linkedOnly reports whether f is how a delta says that the host file at its
// path gained hard links and did not change otherwise (native before → a).
func linkedOnly(f *dryexec.FileChange, a, before *entry) bool {
	return f.Op == dryexec.OpModify && f.Kind == dryexec.KindFile && f.LinkGroup != 0 &&
		f.SHA256 == f.BeforeSHA256 && f.SHA256 == a.sha && a.nlink > before.nlink
}
