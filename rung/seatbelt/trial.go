//go:build linux || darwin

package seatbelt

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/fswalk"
	"github.com/dryexec/dryexec/rung/internal/hostproc"
)

// differ is what a trial needs of package fsdelta's Differ.
type differ interface {
	entrySink
	FinishDelta(d *dryexec.StateDelta) error
	CrossedReason() string
	Close()
}

// platform is what a trial needs of its OS: macOS's clonefile and
// sandbox-exec (rung_darwin.go), or, in the Linux tests, a plain copy and
// no boundary at all.
type platform struct {
	// clone makes dst (which does not exist) a copy of the tree src.
	clone func(src, dst string) error
	// confine wraps argv so that it runs under profile; nil runs argv as
	// it is, unconfined (the Linux tests of the trial's steps).
	confine func(profile string, argv []string) []string
	// homes are the home directories whose default masks apply.
	homes []string
	// getenv reads the caller's environment (where dryexec keeps its state).
	getenv func(string) string
	// denials starts reading Seatbelt's reports of what a profile tagged
	// tag denied (macOS: `log stream`), its markers in the directory marks,
	// with a warning when it cannot; nil reads none (Linux).
	denials func(ctx context.Context, marks, tag string) (*denialLog, string)
}

// checkSpec refuses what this rung cannot honour before anything is made.
func checkSpec(spec dryexec.TrialSpec) error {
	a := spec.Action
	if len(a.Argv) == 0 || a.Argv[0] == "" {
		return fmt.Errorf("%w: empty argv", dryexec.ErrBadAction)
	}
	if !filepath.IsAbs(a.Cwd) {
		return fmt.Errorf("%w: cwd %q is not absolute", dryexec.ErrBadAction, a.Cwd)
	}
	if spec.Image != nil {
		return &dryexec.IsolationUnavailableError{Rung: Name, Missing: "sandboxes from an image (--image) are not supported on seatbelt (use --rung ns on Linux)"}
	}
	return nil
}

// cover is what the profile denies: the credential masks and dryexec's own
// state, each as given and, where it differs, as its symlinks resolve
// (Seatbelt matches the resolved path).
func cover(spec dryexec.TrialSpec, pf platform) (masked, hidden []string, err error) {
	masks, err := dryexec.MaskPaths(pf.homes, spec.Masks, spec.NoDefaultMasks)
	if err != nil {
		return nil, nil, err
	}
	own := slices.Clone(spec.OwnPaths)
	if h, err := dryexec.DefaultHome(pf.getenv); err == nil {
		own = append(own, h)
	}
	for _, h := range pf.homes {
		own = append(own, filepath.Join(h, ".local", "state", "dryexec"))
	}
	return withResolved(masks), withResolved(own), nil
}

// withResolved is paths, clean, each followed by its resolved form where
// that differs, without duplicates.
func withResolved(paths []string) []string {
	var out []string
	for _, p := range paths {
		p = filepath.Clean(p)
		if !filepath.IsAbs(p) || p == "/" {
			continue
		}
		out = append(out, p)
		if r, err := filepath.EvalSymlinks(p); err == nil && r != p {
			out = append(out, r)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// under reports whether p is dir or beneath it.
func under(p, dir string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/") || dir == "/"
}

// trial runs one trial on pf: the working directory cloned into a scratch
// dir, the masked and hidden paths removed from the clone (the command
// must not read the clone's copy of a secret any more than the original),
// a snapshot of the clone, the command in the clone under the profile, and
// the clone walked against the snapshot into pf's Differ.
func trial(ctx context.Context, spec dryexec.TrialSpec, pf platform) (*dryexec.StateDelta, error) {
	spec = spec.WithDefaults()
	if err := checkSpec(spec); err != nil {
		return nil, err
	}
	if spec.TrialID == "" {
		spec.TrialID = dryexec.NewTrialID()
	}
	// The working directory as its symlinks resolve: the Differ and commit
	// never follow one on the way to a path, and on macOS /tmp and /var are
	// symlinks (to /private/...). The delta's paths are the resolved ones.
	orig, err := filepath.EvalSymlinks(filepath.Clean(spec.Action.Cwd))
	if err != nil {
		return nil, fmt.Errorf("%w: the working directory: %w", dryexec.ErrBadAction, err)
	}
	masked, hidden, err := cover(spec, pf)
	if err != nil {
		return nil, err
	}
	netCfg, err := netConfig(spec, pf.getenv)
	if err != nil {
		return nil, err
	}
	for _, c := range append(slices.Clone(masked), hidden...) {
		if under(orig, c) {
			return nil, fmt.Errorf("%w: the working directory %s is masked or dryexec's own state", dryexec.ErrBadAction, orig)
		}
	}
	df, err := newDiffer(orig, spec, append(slices.Clone(masked), hidden...))
	if err != nil {
		return nil, err
	}
	defer df.Close()
	scratch, err := os.MkdirTemp("", "dryexec-seatbelt-"+spec.TrialID+"-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(scratch)
	// Seatbelt matches resolved paths: macOS's temp dir is beneath /var,
	// a symlink to /private/var.
	if scratch, err = filepath.EvalSymlinks(scratch); err != nil {
		return nil, err
	}
	root, tmp, marks := filepath.Join(scratch, "w"), filepath.Join(scratch, "tmp"), filepath.Join(scratch, "marks")
	if err := pf.clone(orig, root); err != nil {
		return nil, fmt.Errorf("seatbelt: cloning %s: %w", orig, err)
	}
	for _, d := range []string{tmp, marks} {
		if err := os.Mkdir(d, 0o700); err != nil {
			return nil, err
		}
	}
	// The clone's counterparts of what is covered: removed, and denied too.
	inClone := func(paths []string) []string {
		var out []string
		for _, p := range paths {
			if under(p, orig) {
				out = append(out, filepath.Join(root, strings.TrimPrefix(p, orig)))
			}
		}
		return out
	}
	cm, ch := inClone(masked), inClone(hidden)
	for _, p := range append(slices.Clone(cm), ch...) {
		if err := os.RemoveAll(p); err != nil {
			return nil, err
		}
	}
	snap, err := takeSnapshot(root)
	if err != nil {
		return nil, err
	}
	since, err := fswalk.FSTick(scratch)
	if err != nil {
		return nil, err
	}
	nw, err := startNet(ctx, netCfg, filepath.Join(scratch, "netsim-ca.pem"))
	if err != nil {
		return nil, err
	}
	defer nw.close()
	tag, err := newTag()
	if err != nil {
		return nil, err
	}
	pr := Profile{Writable: []string{root, tmp}, Masked: append(masked, cm...), Hidden: append(append(hidden, ch...), marks), NetProxyPort: nw.port, Tag: tag}
	profile, err := pr.SBPL()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", dryexec.ErrBadAction, err)
	}
	argv := spec.Action.Argv
	if pf.confine != nil {
		argv = pf.confine(profile, argv)
	}
	d := &dryexec.StateDelta{TrialID: spec.TrialID, Rung: Name, Action: spec.Action, Warnings: []string{Unenforced}}
	var watch *denialLog
	if pf.denials != nil {
		var warn string
		if watch, warn = pf.denials(ctx, marks, tag); warn != "" {
			d.Warnings = append(d.Warnings, warn)
		}
	}
	if err := hostproc.Run(ctx, spec, argv, environ(spec.Action, tmp, nw.env), root, &d.Process); err != nil {
		watch.close()
		return nil, err
	}
	if err := nw.finish(d); err != nil {
		watch.close()
		return nil, err
	}
	if watch != nil {
		denied, warn := watch.stop(ctx)
		if warn != "" {
			d.Warnings = append(d.Warnings, warn)
		}
		d.Violations = append(d.Violations, pr.violations(denied, func(p string) string { return fromClone(p, root, orig) })...)
		d.Network = append(d.Network, pr.networkEvents(denied)...)
	}
	if err := walkClone(root, snap, since, df); err != nil {
		return nil, fmt.Errorf("seatbelt: walking the clone: %w", err)
	}
	if err := df.FinishDelta(d); err != nil {
		return nil, err
	}
	if r := df.CrossedReason(); r != "" {
		d.Incomplete, d.IncompleteReason = true, r
	}
	d.Memory.Method = "none"
	d.Memory.PeakRSSBytes = d.Process.PeakRSSBytes
	d.Normalize()
	d.ComputeTotals()
	return d, nil
}

// newTag is a sandbox's own Profile.Tag: random, so that no other
// sandbox's denials carry it (denials.go).
func newTag() (string, error) {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return "dryexec-" + hex.EncodeToString(b), nil
}

// environ is the action's environment with TMPDIR pointed at the sandbox's
// private tmp (the profile lets nothing write to the host's /tmp, and tools
// that make temp files, sort, cc, a shell's here-documents, follow TMPDIR),
// and netsim's proxy and trust variables (net) over the action's own, with
// no NO_PROXY to send a destination around the proxy. The delta still
// records the action's own environment.
func environ(a dryexec.Action, tmp string, net map[string]string) []string {
	return withNet(maps.Clone(a.Env), tmp, net)
}

// withNet is vars (which it changes) with TMPDIR at tmp, net's variables
// over vars' own and no NO_PROXY, as KEY=VALUE: a trial's command's
// environment (environ) and a session's execs' (sessionNet.env).
func withNet(vars map[string]string, tmp string, net map[string]string) []string {
	if vars == nil {
		vars = map[string]string{}
	}
	for _, k := range noProxyVars {
		delete(vars, k)
	}
	for k, v := range net {
		vars[k] = v
	}
	vars["TMPDIR"] = tmp
	return hostproc.Environ(vars)
}

// fromClone is p with the clone's root replaced by the original directory
// it was cloned from: where a report about the clone names the host's path.
func fromClone(p, root, orig string) string {
	if under(p, root) {
		return orig + strings.TrimPrefix(p, root)
	}
	return p
}
