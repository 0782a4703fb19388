// Package procfs owns reading numbers out of Linux /proc files of the
// "Key:   value [kB]" form (status, smaps_rollup, meminfo): one parser for the
// guest's memory delta, the warm pool's idle cost, the soak harness and the
// benchmarks. It is text parsing only, so it builds everywhere.
package procfs

import (
	"bytes"
	"os"
	"strconv"
	"strings"
)

// Field returns the number on the line of b that starts with key (e.g.
// "Pss:", "VmRSS:", or a cgroup file's "oom_kill"): the first word after the
// key, which must end there (a colon, or a space or tab after it, so that
// "oom_kill" is not "oom_kill_disable"). Values in kB are returned in kB: the
// caller knows the unit. It allocates nothing (the cgroup counters are read
// after every trial).
func Field(b []byte, key string) (int64, bool) {
	word := !strings.HasSuffix(key, ":") // the key must end at a blank
	for len(b) > 0 {
		line := b
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			b = nil
		}
		if len(line) < len(key) || string(line[:len(key)]) != key {
			continue
		}
		rest := line[len(key):]
		if word && (len(rest) == 0 || rest[0] != ' ' && rest[0] != '\t') {
			continue
		}
		rest = bytes.TrimLeft(rest, " \t")
		if i := bytes.IndexAny(rest, " \t"); i >= 0 {
			rest = rest[:i]
		}
		// The conversion does not allocate: ParseInt does not keep it.
		v, err := strconv.ParseInt(string(rest), 10, 64)
		return v, err == nil
	}
	return 0, false
}

// FileField is Field of the file at path; false when it cannot be read.
func FileField(path, key string) (int64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	return Field(b, key)
}

// Rollup returns a process's resident and proportional set sizes in bytes,
// from /proc/PID/smaps_rollup (zero when it cannot be read: the process is
// gone).
func Rollup(pid int) (rss, pss int64) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		return 0, 0
	}
	rss, _ = Field(b, "Rss:")
	pss, _ = Field(b, "Pss:")
	return rss << 10, pss << 10
}
