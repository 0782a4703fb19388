package commit

import (
	"fmt"
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
}

// plan is the ordered steps of one commit plus what conflict checking needs.
type plan struct {
	steps   []step
	changes []dryexec.FileChange // the selected changes, for the result
	// first is the first change at each path in delta order: it says what the
	// host must look like there now.
	first map[string]dryexec.FileChange
	// removed lists, per removed dir, the children the delta removes.
	created map[string]bool // dirs this commit creates
	removed map[string]bool // paths this commit removes
}

// selectChanges returns the changes of d under any of paths (all when none),
// plus every mkdir of an ancestor they need.
func selectChanges(d *dryexec.StateDelta, paths []string) ([]dryexec.FileChange, error) {
	for _, f := range d.Files {
		if !strings.HasPrefix(f.Path, "/") || f.Path == "/" || path.Clean(f.Path) != f.Path || strings.ContainsRune(f.Path, 0) {
			return nil, fmt.Errorf("commit: trial %s holds a bad path %q", d.TrialID, f.Path)
		}
	}
	if len(paths) == 0 {
		return slices.Clone(d.Files), nil
	}
	mkdirs := map[string]bool{}
	for _, f := range d.Files {
		if f.Op == dryexec.OpMkdir {
			mkdirs[f.Path] = true
		}
	}
	want := map[string]bool{}
	matched := make([]bool, len(paths))
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
			return nil, fmt.Errorf("commit: trial %s changed nothing at or under %s", d.TrialID, paths[i])
		}
	}
	for p := range want {
		for a := path.Dir(p); a != "/"; a = path.Dir(a) {
			if mkdirs[a] {
				want[a] = true
			}
		}
	}
	var out []dryexec.FileChange
	for _, f := range d.Files {
		if want[f.Path] {
			out = append(out, f)
		}
	}
	return out, nil
}

func parseMode(s string) uint32 {
	var m uint32
	fmt.Sscanf(s, "%o", &m)
	return m & 0o7777
}

func depth(p string) int { return strings.Count(p, "/") }

// makePlan orders the steps: removals deepest first, then mkdirs shallowest
// first, then new contents, then mode changes.
func makePlan(trialID string, changes []dryexec.FileChange) (*plan, error) {
	pl := &plan{changes: changes, first: map[string]dryexec.FileChange{}, created: map[string]bool{}, removed: map[string]bool{}}
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
	name := func(p, suffix string) string {
		n++
		return path.Join(path.Dir(p), fmt.Sprintf(".dryexec-%s-%d%s", tag, n, suffix))
	}
	var removes, mkdirs, places, chmods []step
	for _, p := range order {
		for _, f := range byPath[p] {
			s := step{Path: p, Mode: parseMode(f.Mode), UID: f.UID, GID: f.GID}
			switch f.Op {
			case dryexec.OpDelete, dryexec.OpRmdir:
				s.Kind, s.Backup = stepRemove, name(p, ".old")
				pl.removed[p] = true
				removes = append(removes, s)
			case dryexec.OpMkdir:
				s.Kind = stepMkdir
				pl.created[p] = true
				mkdirs = append(mkdirs, s)
			case dryexec.OpCreate, dryexec.OpModify, dryexec.OpSymlink:
				if f.Kind == dryexec.KindOther || f.Kind == dryexec.KindDir {
					return nil, fmt.Errorf("commit: cannot commit %s: a %s of kind %s", p, f.Op, f.Kind)
				}
				s.Kind, s.Temp, s.FileKnd = stepPlace, name(p, ""), f.Kind
				s.Replace = f.Op == dryexec.OpModify
				s.SHA, s.Size, s.Link = f.SHA256, f.Size, f.LinkTarget
				places = append(places, s)
			case dryexec.OpChmod:
				s.Kind, s.OldMode = stepChmod, parseMode(f.BeforeMode)
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
		places[i].InNewDir = pl.created[path.Dir(places[i].Path)]
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
	slices.SortStableFunc(removes, func(a, b step) int { return depth(b.Path) - depth(a.Path) })
	slices.SortStableFunc(mkdirs, func(a, b step) int { return depth(a.Path) - depth(b.Path) })
	pl.steps = slices.Concat(removes, mkdirs, places, chmods)
	return pl, nil
}
