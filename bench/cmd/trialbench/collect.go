//go:build linux

package main

import (
	"fmt"
	"os"
	"path/filepath"
)

// collectGroup: the wall time of `dryexec run --timeout 5s` (the whole CLI
// process: trial, hashing, store, delta) for sparse files whose zeros take
// from seconds to ages to hash, against /bin/true. Hashing after the command
// is bounded by the trial's deadline (docs/limits.md): every row must end
// within the timeout (or CollectMin after the command) plus the trial's own
// overhead. Three rounds, no warm-up.
func collectGroup(e *env) ([]group, error) {
	dir := filepath.Join(e.work, "collect")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	run := func(sh string) func() (float64, error) {
		return timed(func() error {
			err := e.command(dir, e.bin, "run", "--timeout", "5s", "--", "sh", "-c", sh)()
			// 3: review (content not kept), 4: block (incomplete).
			if x, ok := err.(interface{ ExitCode() int }); ok && (x.ExitCode() == 3 || x.ExitCode() == 4) {
				return nil
			}
			return err
		})
	}
	g := group{key: "collect", title: "dryexec run --timeout 5s with a sparse file: wall time (3 rounds)", unit: unitMS,
		bases: []int{0}, rounds: 3, cands: []candidate{
			{name: "/bin/true", run: run("true")},
			{name: "a 1 GiB sparse file (hashed and kept)", run: run("truncate -s 1G f")},
			{name: "a 16 GiB sparse file (hashing cut off by the deadline)", run: run("truncate -s 16G f")},
			{name: "a 100 GiB sparse file (not tried: past the deadline at any rate)", run: run("truncate -s 100G f")},
			{name: fmt.Sprintf("a %d-byte sparse file", int64(1<<63-1)), run: run("truncate -s 9223372036854775807 f")},
		}}
	return []group{g}, nil
}
