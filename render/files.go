package render

import (
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/dryexec/dryexec"
)

// DefaultMaxFileLines is about how many lines the summary's list of changes
// takes when Options.MaxFileLines is 0: one screen with the header, the
// decision and the commit line.
const DefaultMaxFileLines = 30

// groupDepths are the depths below the working directory (or below / for a
// path outside it) at which changes are grouped; the summary shows the
// deepest whose groups fit (see fileSummary).
const groupDepths = 3

// counts is what a set of changes did.
type counts struct {
	created, modified, deleted int
	bytes                      int64
}

func (c *counts) add(f *dryexec.FileChange) {
	switch f.Op {
	case dryexec.OpCreate, dryexec.OpSymlink, dryexec.OpMkdir:
		c.created++
	case dryexec.OpDelete, dryexec.OpRmdir:
		c.deleted++
	default:
		c.modified++
	}
	if (f.Op == dryexec.OpCreate || f.Op == dryexec.OpModify) && f.Size > 0 {
		c.bytes = satAdd(c.bytes, f.Size)
	}
}

func (c *counts) merge(o counts) {
	c.created += o.created
	c.modified += o.modified
	c.deleted += o.deleted
	c.bytes = satAdd(c.bytes, o.bytes)
}

func (c counts) n() int { return c.created + c.modified + c.deleted }

func satAdd(a, b int64) int64 {
	if s := a + b; s >= a {
		return s
	}
	return 1<<63 - 1
}

// group is the changes at and under one path.
type group struct {
	key string // the path shown: relative to the working directory, or absolute
	counts
	// one is the group's only change, as a line, while it has only one.
	one   string
	op    dryexec.Op
	isDir bool // one is a directory's own change (mkdir, rmdir, a dir's chmod)
}

// level is the grouping at one depth: at most max groups, in the order they
// were first seen; changes past that are counted, not kept.
type level struct {
	depth  int
	groups []*group
	index  map[string]int
	rest   counts // changes whose group did not fit
}

// fileSummary collects a delta's changes for the summary in one pass with
// bounded memory, whatever their number (a spilled delta of a million files
// is read one change at a time): the totals, and for each depth 1..groupDepths
// at most maxLines groups.
type fileSummary struct {
	cwd    string
	total  counts
	levels []*level
	max    int
}

func newFileSummary(cwd string, max int) *fileSummary {
	s := &fileSummary{cwd: path.Clean(cwd), max: max}
	if cwd == "" || !strings.HasPrefix(cwd, "/") {
		s.cwd = ""
	}
	for d := 1; d <= groupDepths; d++ {
		s.levels = append(s.levels, &level{depth: d, index: map[string]int{}})
	}
	return s
}

// rel is p as shown in a grouped summary: relative to the working directory
// when it is beneath it, else absolute.
func (s *fileSummary) rel(p string) string {
	if s.cwd != "" && s.cwd != "/" && strings.HasPrefix(p, s.cwd+"/") {
		return p[len(s.cwd)+1:]
	}
	return p
}

// keyAt is the group of shown path p at depth d: its first d components.
func keyAt(p string, d int) string {
	abs := strings.HasPrefix(p, "/")
	rest := strings.TrimPrefix(p, "/")
	i, n := 0, 0
	for n < d {
		j := strings.IndexByte(rest[i:], '/')
		if j < 0 {
			return p
		}
		i += j + 1
		n++
	}
	k := rest[:i-1]
	if abs {
		return "/" + k
	}
	return k
}

func (s *fileSummary) add(f *dryexec.FileChange) {
	s.total.add(f)
	shown := s.rel(f.Path)
	for _, l := range s.levels {
		key := keyAt(shown, l.depth)
		i, ok := l.index[key]
		if !ok {
			if len(l.groups) >= s.max {
				l.rest.add(f)
				continue
			}
			i = len(l.groups)
			l.index[key] = i
			l.groups = append(l.groups, &group{key: key})
		}
		g := l.groups[i]
		if g.n() == 0 {
			c := *f
			c.Path = shown
			g.one, g.op = fileDescription(c), f.Op
			g.isDir = key == shown && (f.Kind == dryexec.KindDir || f.Op == dryexec.OpMkdir || f.Op == dryexec.OpRmdir)
		}
		g.add(f)
	}
}

// groupTarget is how many groups a compact overview has at most: the summary
// shows the deepest level with no more, so that a venv is a few lines
// (v/bin/, v/lib/, …) rather than a line per file in v/bin.
const groupTarget = 10

// pick chooses the level to show (once a directory's own change is folded
// into the group of its contents): the deepest with at most groupTarget
// groups; else the shallowest whose groups fit in max lines; else the
// shallowest, cut, with the rest counted.
func (s *fileSummary) pick() ([]*group, counts) {
	for i := len(s.levels) - 1; i >= 0; i-- {
		if l := s.levels[i]; l.rest.n() == 0 {
			if gs := fold(l.groups); len(gs) <= min(groupTarget, s.max) {
				return gs, counts{}
			}
		}
	}
	for _, l := range s.levels {
		if l.rest.n() == 0 {
			if gs := fold(l.groups); len(gs) <= s.max {
				return gs, counts{}
			}
		}
	}
	l := s.levels[0]
	gs := fold(l.groups)
	var rest counts
	rest.merge(l.rest)
	if len(gs) > s.max-1 {
		for _, g := range gs[s.max-1:] {
			rest.merge(g.counts)
		}
		gs = gs[:s.max-1]
	}
	return gs, rest
}

// fold sorts groups by path and merges a group that is only a directory's own
// change (mkdir v) into the group of its contents when that is the only one
// (v/bin at depth 2, nothing else in v), so that a created tree is not a line
// per level.
func fold(in []*group) []*group {
	gs := make([]*group, 0, len(in))
	for _, g := range in {
		c := *g
		gs = append(gs, &c)
	}
	// Beneath the working directory first (relative), then elsewhere.
	slices.SortFunc(gs, func(a, b *group) int {
		if aa, ba := strings.HasPrefix(a.key, "/"), strings.HasPrefix(b.key, "/"); aa != ba {
			if aa {
				return 1
			}
			return -1
		}
		return strings.Compare(a.key, b.key)
	})
	out := gs[:0]
	for i, g := range gs {
		// Only into a sole group beneath it: folded into the first of
		// several (v/bin of v/bin, v/lib), the directory's own change would
		// be counted as one of that group's files, and the line would say
		// one file more than that subtree holds.
		if g.isDir && g.n() == 1 && i+1 < len(gs) && strings.HasPrefix(gs[i+1].key, g.key+"/") &&
			(i+2 >= len(gs) || !strings.HasPrefix(gs[i+2].key, g.key+"/")) {
			gs[i+1].merge(g.counts)
			gs[i+1].one = "" // no longer one change
			continue
		}
		out = append(out, g)
	}
	return out
}

// groupLine is one line of a grouped summary: a single change as itself, a
// subtree as its counts ("v/ — 3,412 files created, 24.0 MiB").
func groupLine(g *group, c palette) string {
	if g.n() == 1 && g.one != "" {
		return opSymbol(g.op, c) + " " + g.one
	}
	sym := c.yellow.Sprint("~")
	switch g.n() {
	case g.created:
		sym = c.green.Sprint("+")
	case g.deleted:
		sym = c.red.Sprint("-")
	}
	return sym + " " + cleanField(g.key) + "/ — " + countsText(g.counts)
}

// countsText words counts: "3,412 files created, 24.0 MiB", "12 files (3
// created, 9 modified), 1.5 KiB written".
func countsText(c counts) string {
	var parts []string
	for _, p := range []struct {
		n    int
		verb string
	}{{c.created, "created"}, {c.modified, "modified"}, {c.deleted, "deleted"}} {
		if p.n > 0 {
			parts = append(parts, thousands(int64(p.n))+" "+p.verb)
		}
	}
	files := "files"
	if c.n() == 1 {
		files = "file"
	}
	s := thousands(int64(c.n())) + " " + files + " (" + strings.Join(parts, ", ") + ")"
	if len(parts) == 1 {
		s = thousands(int64(c.n())) + " " + files + " " + strings.TrimPrefix(parts[0], thousands(int64(c.n()))+" ")
	}
	if c.bytes > 0 {
		s += ", " + humanBytes(c.bytes)
		if c.created != c.n() {
			s += " written"
		}
	}
	return s
}

// thousands writes n with commas: 93,883.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	if n < 0 {
		return "-" + thousands(-n)
	}
	var b strings.Builder
	for i, ch := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(ch)
	}
	return b.String()
}

// humanBytes is a size for people: 512 B, 1.5 KiB, 24.0 MiB.
func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return strconv.FormatInt(n, 10) + " B"
	}
	v, i := float64(n), -1
	for v >= unit && i < 4 {
		v /= unit
		i++
	}
	return strconv.FormatFloat(v, 'f', 1, 64) + " " + "KMGTP"[i:i+1] + "iB"
}
