//go:build linux

package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
)

// makeFiles is the command of the big-delta group: it creates N small text
// files, 1000 to a directory.
const makeFiles = `import os, sys
n = int(sys.argv[1])
for d in range((n + 999) // 1000):
    os.mkdir("d%04d" % d)
    for i in range(min(1000, n - d * 1000)):
        with open("d%04d/f%04d" % (d, i), "w") as f:
            f.write("x%d\n" % i)
`

// bigDeltaGroup: the peak RSS of `dryexec run` (the CLI process: walk,
// hashing, store, policy, receipt, delta.json, the summary) for a trial
// that creates cfg.bigFiles small files, against the same command run bare.
// One round, no warm-up: a sample takes minutes.
func bigDeltaGroup(e *env) ([]group, error) {
	n := e.cfg.bigFiles
	script := filepath.Join(e.work, "makefiles.py")
	if err := os.WriteFile(script, []byte(makeFiles), 0o644); err != nil {
		return nil, err
	}
	// The upper dir holds a page per small file.
	upper := fmt.Sprint(int64(n)*8192 + 1<<30)
	fresh := func() (string, error) {
		dir := filepath.Join(e.work, "bigdelta")
		if err := os.RemoveAll(dir); err != nil {
			return "", err
		}
		return dir, os.Mkdir(dir, 0o755)
	}
	peak := func(argv ...string) func() (float64, error) {
		return func() (float64, error) {
			dir, err := fresh()
			if err != nil {
				return 0, err
			}
			defer os.RemoveAll(dir)
			c := exec.Command(argv[0], argv[1:]...)
			c.Dir, c.Env = dir, []string{"PATH=/usr/bin:/bin", "DRYEXEC_HOME=" + filepath.Join(e.work, "home")}
			c.Stdout, c.Stderr = io.Discard, os.Stderr
			// dryexec run exits 4 here (the default policy blocks a
			// million changed paths): only a failure of dryexec counts.
			if err := c.Run(); err != nil && c.ProcessState.ExitCode() != 4 {
				return 0, fmt.Errorf("%v: %w", argv, err)
			}
			// ru_maxrss of the process (and of the children it reaped:
			// the guest, far smaller), in KiB.
			ru := c.ProcessState.SysUsage().(*syscall.Rusage)
			return float64(ru.Maxrss) / 1024, nil
		}
	}
	g := group{key: "bigdelta", title: fmt.Sprintf("Peak RSS of a trial creating %d small files (1 round)", n),
		unit: unitMiB, bases: []int{1}, rounds: 1, cands: []candidate{
			{name: fmt.Sprintf("dryexec run (%d files, stored, summary printed)", n),
				run: peak(e.bin, "run", "--timeout", "60m", "--upper-size", upper, "--", "/usr/bin/python3", script, fmt.Sprint(n))},
			{name: "the same python3 command, bare", label: "bare",
				run: peak("/usr/bin/python3", script, fmt.Sprint(n))},
		}}
	return []group{g}, nil
}
