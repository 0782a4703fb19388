package policy

import (
	"fmt"
	"path"
	"path/filepath"
	"strings"
)

// glob is one compiled target pattern. Patterns match whole paths, segment by
// segment: within a segment `*`, `?` and `[…]` behave as in path.Match (and `*`
// matches dot files too, unlike a shell); a segment that is exactly `**` matches
// zero or more whole segments, so `/a/build/**` matches `/a/build` itself and
// everything beneath it. `*` or `**` alone match every path.
type glob struct {
	src  string // as written in the policy, for reasons
	segs []seg  // segments after the leading "/"
	all  bool
	// Cheap rejections, checked before the segment walk so that most paths
	// cost a HasPrefix and a few Contains: lit is the longest literal prefix
	// (whole segments); needles are "/"+each literal segment, which must occur
	// in the path; and last matches the final segment when the pattern does
	// not end in "**".
	lit     string
	needles []string
	last    *seg
}

// seg matches one path segment. Most policy segments are literals or a single
// star with a literal on one side, which need no general matcher.
type seg struct {
	kind     segKind
	s        string // literal, or the general pattern
	pre, suf string
}

type segKind uint8

const (
	segLit     segKind = iota // exact
	segStar                   // "*": any segment
	segAffix                  // "pre*suf"
	segGeneral                // path.Match
	segAny                    // "**": zero or more segments
)

func compileSeg(s string) seg {
	switch {
	case s == "**":
		return seg{kind: segAny}
	case s == "*":
		return seg{kind: segStar}
	case !strings.ContainsAny(s, `*?[\`):
		return seg{kind: segLit, s: s}
	}
	if i := strings.IndexByte(s, '*'); i >= 0 && !strings.ContainsAny(s[:i], `*?[\`) && !strings.ContainsAny(s[i+1:], `*?[\`) {
		return seg{kind: segAffix, pre: s[:i], suf: s[i+1:]}
	}
	return seg{kind: segGeneral, s: s}
}

func (m *seg) match(s string) bool {
	switch m.kind {
	case segLit:
		return s == m.s
	case segStar:
		return true
	case segAffix:
		return len(s) >= len(m.pre)+len(m.suf) && strings.HasPrefix(s, m.pre) && strings.HasSuffix(s, m.suf)
	default:
		ok, _ := path.Match(m.s, s)
		return ok
	}
}

// compileGlob compiles pattern. A pattern starting with "**/" matches anywhere;
// another relative pattern (not starting with "/") is resolved against base, the action's working directory; relative patterns
// without a base are an error, as are patterns starting with "~" (whose home?).
func compileGlob(pattern, base string) (glob, error) {
	g := glob{src: pattern}
	switch {
	case pattern == "":
		return g, fmt.Errorf("empty pattern")
	case pattern == "*" || pattern == "**" || pattern == "/**":
		g.all = true
		return g, nil
	case strings.HasPrefix(pattern, "~"):
		return g, fmt.Errorf("pattern %q: ~ is not expanded; write an absolute path, a path relative to the working directory, or **/…", pattern)
	}
	p := pattern
	if strings.HasPrefix(p, "**/") {
		// "**/x" matches x anywhere, not only beneath the working directory.
		p = "/" + p
	}
	if !strings.HasPrefix(p, "/") {
		if base == "" || !filepath.IsAbs(base) {
			return g, fmt.Errorf("pattern %q is relative but the action has no absolute working directory", pattern)
		}
		p = base + "/" + p
	}
	// Clean resolves "." and ".." textually, so "./build/**" and "../x" work as
	// a reader expects; it never crosses a "**" wrongly because ".." after "**"
	// is refused below.
	for s := range strings.SplitSeq(p, "/") {
		if s == "**" {
			continue
		}
		if _, err := path.Match(s, ""); err != nil {
			return g, fmt.Errorf("pattern %q: bad segment %q: %w", pattern, s, err)
		}
	}
	if i := strings.Index(p, "**/.."); i >= 0 {
		return g, fmt.Errorf("pattern %q: .. after ** is ambiguous", pattern)
	}
	p = path.Clean(p)
	if p == "/" {
		g.segs = []seg{}
		return g, nil
	}
	// The needles and the literal prefix are slices of p, which is clean:
	// "/"+s for a segment s starting at i is p[i-1:i+len(s)]. A default
	// policy compiles hundreds of patterns in every `dryexec run`, so this
	// allocates only the two slices.
	n := strings.Count(p, "/")
	g.segs = make([]seg, 0, n)
	prefix, i := true, 1
	for s := range strings.SplitSeq(p[1:], "/") {
		m := compileSeg(s)
		g.segs = append(g.segs, m)
		if m.kind == segLit {
			if g.needles == nil {
				g.needles = make([]string, 0, n)
			}
			g.needles = append(g.needles, p[i-1:i+len(s)])
		}
		if prefix = prefix && m.kind == segLit; prefix {
			g.lit = p[:i+len(s)]
		}
		i += len(s) + 1
	}
	if l := &g.segs[len(g.segs)-1]; l.kind != segAny {
		g.last = l
	}
	return g, nil
}

// match reports whether the clean absolute path p (split as segs, without the
// leading "/") matches.
func (g *glob) match(p string, segs []string) bool {
	if g.all {
		return true
	}
	if g.lit != "" {
		if !strings.HasPrefix(p, g.lit) || (len(p) > len(g.lit) && p[len(g.lit)] != '/') {
			return false
		}
	}
	if g.last != nil && (len(segs) == 0 || !g.last.match(segs[len(segs)-1])) {
		return false
	}
	for _, n := range g.needles {
		if !strings.Contains(p, n) {
			return false
		}
	}
	return matchSegs(g.segs, segs)
}

func matchSegs(pat []seg, segs []string) bool {
	for len(pat) > 0 {
		if pat[0].kind == segAny {
			// Collapse runs of ** and try every split point.
			for len(pat) > 0 && pat[0].kind == segAny {
				pat = pat[1:]
			}
			if len(pat) == 0 {
				return true
			}
			for i := 0; i <= len(segs); i++ {
				if matchSegs(pat, segs[i:]) {
					return true
				}
			}
			return false
		}
		if len(segs) == 0 {
			return false
		}
		if !pat[0].match(segs[0]) {
			return false
		}
		pat, segs = pat[1:], segs[1:]
	}
	return len(segs) == 0
}

// globSet is a list of compiled patterns, indexed so that a path is tried only
// against the patterns that can match it. A pattern whose first segment is
// literal ("/etc/**") is a candidate only for paths with that first segment;
// else one whose last segment is literal ("**/.env") only for paths ending in
// it; else one with some literal segment ("**/.ssh/**") only for paths having
// its last literal segment anywhere. So a path costs two map lookups plus one
// per segment, whatever the number of patterns.
type globSet struct {
	gs      []glob
	all     bool             // some pattern matches everything
	byFirst map[string][]int // first segment → patterns
	byLast  map[string][]int // last segment → patterns
	byAny   map[string][]int // a segment anywhere → patterns
	rest    []int            // patterns without a literal segment
	// Filters in front of each map: most path segments cannot be a key (wrong
	// first byte or length), and checking that is cheaper than hashing.
	fFirst, fLast, fAny keyFilter
}

// keyFilter remembers the first bytes and lengths of a map's keys.
type keyFilter struct {
	first [256]bool
	lens  uint64 // bit n: a key of length n (63: 63 or longer)
}

func (f *keyFilter) add(k string) {
	if k != "" {
		f.first[k[0]] = true
	}
	f.lens |= 1 << min(len(k), 63)
}

func (f *keyFilter) may(s string) bool {
	return s != "" && f.first[s[0]] && f.lens&(1<<min(len(s), 63)) != 0
}

func compileGlobs(field string, patterns []string, base string) (*globSet, error) {
	set := &globSet{gs: make([]glob, 0, len(patterns)), byFirst: map[string][]int{}, byLast: map[string][]int{}, byAny: map[string][]int{}}
	for _, p := range patterns {
		g, err := compileGlob(p, base)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", field, err)
		}
		i := len(set.gs)
		set.gs = append(set.gs, g)
		set.all = set.all || g.all
		switch n := len(g.segs); {
		case g.all:
		case n > 0 && g.segs[0].kind == segLit:
			set.byFirst[g.segs[0].s] = append(set.byFirst[g.segs[0].s], i)
			set.fFirst.add(g.segs[0].s)
		case n > 0 && g.segs[n-1].kind == segLit:
			set.byLast[g.segs[n-1].s] = append(set.byLast[g.segs[n-1].s], i)
			set.fLast.add(g.segs[n-1].s)
		case len(g.needles) > 0:
			key := g.needles[len(g.needles)-1][1:]
			set.byAny[key] = append(set.byAny[key], i)
			set.fAny.add(key)
		default:
			set.rest = append(set.rest, i)
		}
	}
	return set, nil
}

// first returns the earliest-listed pattern matching p (split as segs), or nil.
func (set *globSet) first(p string, segs []string) *glob {
	if i := set.firstIndex(p, segs); i >= 0 {
		return &set.gs[i]
	}
	return nil
}

// firstIndex is first as an index into set.gs, or -1.
func (set *globSet) firstIndex(p string, segs []string) int {
	best := -1
	try := func(i int) {
		if (best < 0 || i < best) && set.gs[i].match(p, segs) {
			best = i
		}
	}
	if set.all {
		for i := range set.gs {
			if set.gs[i].all {
				try(i)
				break
			}
		}
	}
	if len(segs) > 0 {
		if set.fFirst.may(segs[0]) {
			for _, i := range set.byFirst[segs[0]] {
				try(i)
			}
		}
		if last := segs[len(segs)-1]; set.fLast.may(last) {
			for _, i := range set.byLast[last] {
				try(i)
			}
		}
	} else {
		// "/" itself: only patterns without segments ("/") can match.
		for i := range set.gs {
			if len(set.gs[i].segs) == 0 && !set.gs[i].all {
				try(i)
			}
		}
	}
	if len(set.byAny) > 0 {
		for _, s := range segs {
			if set.fAny.may(s) {
				for _, i := range set.byAny[s] {
					try(i)
				}
			}
		}
	}
	for _, i := range set.rest {
		try(i)
	}
	return best
}

// sources lists the patterns as written.
func (set *globSet) sources() []string {
	out := make([]string, len(set.gs))
	for i, g := range set.gs {
		out[i] = g.src
	}
	return out
}

// relative reports whether any pattern depends on the working directory.
func relative(patterns []string) bool {
	for _, p := range patterns {
		if p != "*" && p != "**" && !strings.HasPrefix(p, "/") && !strings.HasPrefix(p, "**/") {
			return true
		}
	}
	return false
}
