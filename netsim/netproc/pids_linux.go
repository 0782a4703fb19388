package netproc

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Children lists the processes in the role (started by Start) whose parent
// is parent, from /proc: what a test kills to show that a role's death
// ends one sandbox's network and nothing else.
func Children(parent int) []int {
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []int
	for _, st := range stats {
		b, err := os.ReadFile(st)
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces, so cut at the last ')'.
		s := string(b)
		f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
		if len(f) < 2 || f[1] != strconv.Itoa(parent) {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(st)))
		cmd, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if args := strings.Split(string(cmd), "\x00"); len(args) > 1 && args[1] == Role {
			out = append(out, pid)
		}
	}
	return out
}
