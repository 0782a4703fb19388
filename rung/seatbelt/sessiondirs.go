//go:build linux || darwin

package seatbelt

import (
	"os"
	"path/filepath"
	"slices"

	"github.com/dryexec/dryexec"
)

// checkSandbox refuses a session's spec this rung cannot honour, as
// checkSpec a trial's (an image).
func checkSandbox(spec dryexec.SandboxSpec) error {
	return checkSpec(dryexec.TrialSpec{Net: spec.Net, Image: spec.Image, Action: dryexec.Action{Argv: []string{"guest"}, Cwd: "/"}})
}

// sessionDirs are one seatbelt session's scratch dir on the host and what
// it holds: the workspace and its baseline (the guest's scan staging), the
// commands' private tmp, the denial markers' dir and, in a fork's branch,
// the origin (the parent's baseline at the fork).
type sessionDirs struct {
	tmp, ws, base, cmdTmp, marks string
	// origin is "" but in a branch.
	origin string
}

// forkSource is what a branch's dirs are cloned from: its parent's
// workspace and baseline, with clone (clonefile on macOS).
type forkSource struct {
	ws, base string
	clone    func(src, dst string) error
}

// newSessionDirs makes a session's scratch dir, resolved through symlinks
// (Seatbelt matches resolved paths; macOS's temp dir is beneath /var, a
// symlink): an empty workspace and baseline, or, from a parent (from not
// nil), the parent's workspace cloned as the workspace and again as the
// baseline (the fork point: the branch's diff starts empty), and the
// parent's baseline as the origin. The clones are dryexec's own, made
// before the branch's guest starts, so the fork request names no copies.
func newSessionDirs(from *forkSource) (d *sessionDirs, err error) {
	tmp, err := os.MkdirTemp("", "dryexec-seatbelt-session-")
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			os.RemoveAll(tmp)
		}
	}()
	if tmp, err = filepath.EvalSymlinks(tmp); err != nil {
		return nil, err
	}
	d = &sessionDirs{tmp: tmp, ws: filepath.Join(tmp, "workspace"), base: filepath.Join(tmp, "baseline"),
		cmdTmp: filepath.Join(tmp, "tmp"), marks: filepath.Join(tmp, "marks")}
	dirs := []string{d.cmdTmp, d.marks}
	if from == nil {
		dirs = append(dirs, d.ws, d.base)
	} else {
		d.origin = filepath.Join(tmp, "origin")
		// The baseline from the branch's own workspace, which nothing else
		// writes: the two are the same tree even if a process the parent
		// left running writes its workspace meanwhile.
		for _, c := range [][2]string{{from.ws, d.ws}, {d.ws, d.base}, {from.base, d.origin}} {
			if err := from.clone(c[0], c[1]); err != nil {
				return nil, err
			}
		}
	}
	for _, dir := range dirs {
		if err := os.Mkdir(dir, 0o755); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// profile is the Profile of the session's commands, which the guest starts
// one by one under it (SessionStart.CommandPrefix; the guest itself runs
// unconfined, as the user, since it must write the baseline): they may
// write the workspace and the private tmp only. The baseline and a
// branch's origin, which the session's diffs are taken against, and the
// markers' dir are hidden with dryexec's state: neither written nor read,
// so a command can neither hide a change from a diff nor forge its before.
func (d *sessionDirs) profile(masked, hidden []string, port int, tag string) Profile {
	h := append(slices.Clone(hidden), d.base, d.marks)
	if d.origin != "" {
		h = append(h, d.origin)
	}
	return Profile{Writable: []string{d.ws, d.cmdTmp}, Masked: masked, Hidden: h, NetProxyPort: port, Tag: tag}
}

// remove removes the scratch dir and everything in it.
func (d *sessionDirs) remove() { os.RemoveAll(d.tmp) }
