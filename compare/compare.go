// Package compare owns the side-by-side view of what several branches of
// one piece of work changed: stored trials, or the diffs of sessions forked
// from one parent. For each path any of them changed it says what each did,
// and whether they did it alike, differently, or only some of them did; each
// side carries its decision. `dryexec compare`, the daemon's compare
// endpoint, the SDK and the MCP tool all return this.
package compare

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/dryexec/dryexec"
)

// Change is what one side did to one path.
type Change struct {
	// Op is "write" (a file created or changed), "symlink", "delete" or
	// "chmod" (the permissions alone).
	Op     string `json:"op"`
	SHA256 string `json:"sha256,omitempty"`
	Size   int64  `json:"size,omitempty"`
	// Mode is the octal permission string after the change ("0644").
	Mode string `json:"mode,omitempty"`
	Link string `json:"link,omitempty"`
}

// Side is one branch to compare.
type Side struct {
	// Name is the trial's or the session's id.
	Name string `json:"name"`
	// Decision is the trial's policy decision (allow, review, block, with
	// Reasons), or a branch's state (open, kept, discarded).
	Decision string   `json:"decision"`
	Reasons  []string `json:"reasons"`
	// Changed counts the paths the side changed.
	Changed int `json:"changed"`
	// Changes maps each changed path to what was done to it.
	Changes map[string]Change `json:"-"`
}

// The agreements of a Path.
const (
	Alike   = "alike"   // every side made the same change
	Differ  = "differ"  // every side changed it, not all alike
	Partial = "partial" // some sides left it alone
)

// Path is one path at least one side changed.
type Path struct {
	Path string `json:"path"`
	// Changes holds one entry per side, in the order of Result.Sides: nil
	// where that side left the path alone.
	Changes   []*Change `json:"changes"`
	Agreement string    `json:"agreement"`
}

// Result is a comparison.
type Result struct {
	Sides []Side `json:"sides"`
	// Paths are sorted by path.
	Paths []Path `json:"paths"`
	// Alike, Differ and Partial count Paths by agreement.
	Alike   int `json:"alike"`
	Differ  int `json:"differ"`
	Partial int `json:"partial"`
}

// Compare compares sides (two or more, for a useful answer).
func Compare(sides ...Side) *Result {
	r := &Result{Sides: make([]Side, len(sides)), Paths: []Path{}}
	seen := map[string]bool{}
	var paths []string
	for i, s := range sides {
		s.Changed = len(s.Changes)
		if s.Reasons == nil {
			s.Reasons = []string{}
		}
		r.Sides[i] = s
		for p := range s.Changes {
			if !seen[p] {
				seen[p] = true
				paths = append(paths, p)
			}
		}
	}
	slices.Sort(paths)
	for _, p := range paths {
		cp := Path{Path: p, Agreement: Alike}
		for _, s := range sides {
			if c, ok := s.Changes[p]; ok {
				cp.Changes = append(cp.Changes, &c)
			} else {
				cp.Changes = append(cp.Changes, nil)
			}
		}
		for _, c := range cp.Changes {
			switch {
			case c == nil:
				cp.Agreement = Partial
			case cp.Agreement == Alike && *c != *cp.Changes[0]:
				cp.Agreement = Differ
			}
		}
		switch cp.Agreement {
		case Alike:
			r.Alike++
		case Differ:
			r.Differ++
		default:
			r.Partial++
		}
		r.Paths = append(r.Paths, cp)
	}
	return r
}

// FromDelta is a stored trial as a side: its file changes (directories
// alone are not compared: a session's diff has none) and its decision.
func FromDelta(d *dryexec.StateDelta) (Side, error) {
	s := Side{Name: d.TrialID, Decision: d.Decision.Choice, Reasons: d.Decision.Reasons, Changes: map[string]Change{}}
	err := d.EachFile(func(f *dryexec.FileChange) error {
		var c Change
		switch f.Op {
		case dryexec.OpCreate, dryexec.OpModify:
			c = Change{Op: "write", SHA256: f.SHA256, Size: f.Size, Mode: f.Mode}
		case dryexec.OpSymlink:
			c = Change{Op: "symlink", Link: f.LinkTarget}
		case dryexec.OpDelete:
			c = Change{Op: "delete"}
		case dryexec.OpChmod:
			c = Change{Op: "chmod", Mode: f.Mode}
		default:
			return nil
		}
		s.Changes[f.Path] = c
		return nil
	})
	return s, err
}

// Render writes r as text: one column per side (its name and decision
// heading it), one row per path, and the agreement.
func Render(w io.Writer, r *Result) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%d paths: %d alike, %d differ, %d changed by some only\n\n", len(r.Paths), r.Alike, r.Differ, r.Partial)
	cols := make([][]string, len(r.Sides)+2)
	cols[0] = []string{"PATH"}
	for i, s := range r.Sides {
		h := s.Name + " (" + s.Decision + ")"
		cols[i+1] = []string{h}
	}
	cols[len(cols)-1] = []string{""}
	for _, p := range r.Paths {
		cols[0] = append(cols[0], p.Path)
		for i, c := range p.Changes {
			cols[i+1] = append(cols[i+1], cell(c))
		}
		cols[len(cols)-1] = append(cols[len(cols)-1], p.Agreement)
	}
	widths := make([]int, len(cols))
	for i, c := range cols {
		for _, v := range c {
			widths[i] = max(widths[i], len(v))
		}
	}
	for row := range cols[0] {
		for i, c := range cols {
			if i == len(cols)-1 {
				b.WriteString(c[row])
				continue
			}
			fmt.Fprintf(&b, "%-*s  ", widths[i], c[row])
		}
		b.WriteString("\n")
	}
	for _, s := range r.Sides {
		if len(s.Reasons) > 0 {
			fmt.Fprintf(&b, "\n%s: %s: %s", s.Name, s.Decision, strings.Join(s.Reasons, "; "))
		}
	}
	if len(r.Sides) > 0 {
		b.WriteString("\n")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// cell is one side's change as a short text: the op and the start of the
// content's hash (alike cells read alike).
func cell(c *Change) string {
	switch {
	case c == nil:
		return "-"
	case c.Op == "write":
		h := c.SHA256
		if len(h) > 8 {
			h = h[:8]
		}
		return fmt.Sprintf("write %s %s", c.Mode, h)
	case c.Op == "symlink":
		return "symlink → " + c.Link
	case c.Op == "chmod":
		return "chmod " + c.Mode
	}
	return c.Op
}
