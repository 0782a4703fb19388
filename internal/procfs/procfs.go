// Package procfs owns reading numbers out of Linux /proc files of the
// "Key:   value [kB]" form (status, smaps_rollup, meminfo): one parser for the
// guest's memory delta, the warm pool's idle cost, the soak harness and the
// benchmarks; and listing a process's children by their stat and cmdline
// (Children). It is text parsing only, so it builds everywhere.
package procfs

import (
	"bytes"
	"os"
	"path/filepath"
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

// Children lists the processes whose parent is parent and for which keep
// is true, given their command name (stat's comm) and argv; zombies
// included (their argv is empty). For tests and cleanup checks that look
// for what a sandbox left behind.
func Children(parent int, keep func(comm string, argv []string) bool) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	want := strconv.Itoa(parent)
	var out []int
	for _, st := range stats {
		b, err := os.ReadFile(st)
		if err != nil {
			continue
		}
		comm, f, ok := splitStat(b)
		if !ok || len(f) < 2 || f[1] != want {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(st)))
		cmd, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
		var argv []string
		if len(cmd) > 0 {
			argv = strings.Split(strings.TrimSuffix(string(cmd), "\x00"), "\x00")
		}
		if keep(comm, argv) {
			out = append(out, pid)
		}
	}
	return out
}

// splitStat splits a /proc/PID/stat into the command name and the fields
// after it (state, ppid, …: field 3 of proc(5) is f[0]). The name may hold
// spaces and parentheses, so it ends at the last ')'.
func splitStat(b []byte) (comm string, f []string, ok bool) {
	s := string(b)
	open, end := strings.IndexByte(s, '('), strings.LastIndexByte(s, ')')
	if open < 0 || end < open {
		return "", nil, false
	}
	return s[open+1 : end], strings.Fields(s[end+1:]), true
}

// MinorFaults returns the minor page faults process pid has taken so far
// (proc(5)'s minflt); false when it cannot be read (the process is gone).
// For benchmarks that count what a path costs in first touches of memory.
func MinorFaults(pid int) (int64, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	_, f, ok := splitStat(b)
	if !ok || len(f) < 8 {
		return 0, false
	}
	n, err := strconv.ParseInt(f[7], 10, 64)
	return n, err == nil
}

// TaskChildren lists the children of process pid as its threads' children
// files have them (Linux's CONFIG_PROC_CHILDREN): a few reads where
// Children reads every process's stat, for a caller on a trial's path.
// Nothing when pid is gone.
func TaskChildren(pid int) []int {
	files, _ := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/children")
	var out []int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, s := range strings.Fields(string(b)) {
			if c, err := strconv.Atoi(s); err == nil {
				out = append(out, c)
			}
		}
	}
	return out
}
