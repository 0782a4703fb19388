package dryexec

import (
	"fmt"
	"path"
	"strings"
)

// Limits bounds the processes of one trial or session as a whole (the ns rung
// enforces them with a cgroup; see docs/limits.md for the defaults and why).
// A zero field takes the default; a negative one means "no limit".
type Limits struct {
	// MemoryBytes caps memory (and memory+swap) of everything in the sandbox,
	// the upper tmpfs's pages included. Default: half of the host's RAM.
	MemoryBytes int64
	// Pids caps processes and threads. Default: DefaultPids.
	Pids int64
	// CPUs is a quota in CPUs' worth of time per period (1.5 = one and a half
	// CPUs). Default and negative: no quota.
	CPUs float64
	// CPUWeight is the share of CPU under contention, cgroup v2's scale
	// 1..10000 (v1 shares are derived from it). Default: 100, like any other
	// group.
	CPUWeight int
}

// DefaultPids stops a fork bomb within a second while leaving room for parallel
// builds and test suites with many threads (docs/limits.md).
const DefaultPids = 4096

// Check reports a limit that cannot be set.
func (l Limits) Check() error {
	// -1 is "no limit" for memory and pids, 0 the default; anything below is
	// a mistake, not a stricter limit.
	if l.MemoryBytes < -1 || l.Pids < -1 {
		return fmt.Errorf("%w: memory and pids limits are -1 (none), 0 (the default) or positive, not %d and %d", ErrBadAction, l.MemoryBytes, l.Pids)
	}
	if l.CPUs != l.CPUs || l.CPUs > 1<<20 {
		return fmt.Errorf("%w: cpu quota %g is not a number of CPUs", ErrBadAction, l.CPUs)
	}
	if l.MemoryBytes > 0 && l.MemoryBytes < 16<<20 {
		return fmt.Errorf("%w: memory limit %d bytes is below 16 MiB, too small to start anything", ErrBadAction, l.MemoryBytes)
	}
	if l.Pids > 0 && l.Pids < 8 {
		return fmt.Errorf("%w: pids limit %d is below 8, too small to start the sandbox", ErrBadAction, l.Pids)
	}
	if l.CPUs > 0 && l.CPUs < 0.01 {
		return fmt.Errorf("%w: cpu quota %g is below 0.01 CPUs", ErrBadAction, l.CPUs)
	}
	if l.CPUWeight > 10000 {
		return fmt.Errorf("%w: cpu weight %d is above 10000", ErrBadAction, l.CPUWeight)
	}
	return nil
}

// DefaultMasks are the credential paths, relative to a home directory, that a
// sandbox sees empty unless the caller says otherwise (docs/limits.md, "Secrets").
var DefaultMasks = []string{
	".ssh", ".aws", ".azure", ".config/gcloud", ".docker/config.json", ".netrc",
	".kube", ".gnupg", ".config/gh", ".git-credentials", ".npmrc", ".pypirc",
	".cargo/credentials.toml", ".cargo/credentials", ".config/hub", ".vault-token",
}

// MaskPaths resolves the masked paths of a trial or session: DefaultMasks
// beneath each of homes (unless noDefaults), plus extra (absolute, or "~/…"
// for the first home). The result is clean, absolute and without duplicates.
func MaskPaths(homes []string, extra []string, noDefaults bool) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	add := func(p string) {
		p = path.Clean(p)
		if !seen[p] && p != "/" {
			seen[p] = true
			out = append(out, p)
		}
	}
	if !noDefaults {
		for _, h := range homes {
			if !strings.HasPrefix(h, "/") || path.Clean(h) == "/" {
				continue
			}
			for _, m := range DefaultMasks {
				add(h + "/" + m)
			}
		}
	}
	for _, p := range extra {
		if rest, ok := strings.CutPrefix(p, "~/"); ok {
			if len(homes) == 0 {
				return nil, fmt.Errorf("%w: mask %q: no home directory known", ErrBadAction, p)
			}
			p = homes[0] + "/" + rest
		}
		if !strings.HasPrefix(p, "/") || strings.ContainsRune(p, 0) || path.Clean(p) == "/" {
			return nil, fmt.Errorf("%w: mask %q must be an absolute path other than /", ErrBadAction, p)
		}
		add(p)
	}
	return out, nil
}
