package server

import (
	"os"
	"strconv"
	"strings"
	"syscall"
)

// killUnder SIGKILLs every process whose working directory is inside dir: what
// a host-rung session's exec left running when its daemon was killed (the
// host rung has no pid namespace to end with the guest). A process that left
// the workspace is not found this way; docs/api.md says so.
func killUnder(dir string) int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0
	}
	n := 0
	self := os.Getpid()
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 1 || pid == self {
			continue
		}
		cwd, err := os.Readlink("/proc/" + e.Name() + "/cwd")
		if err != nil {
			continue
		}
		if cwd == dir || strings.HasPrefix(cwd, dir+"/") {
			if syscall.Kill(pid, syscall.SIGKILL) == nil {
				n++
			}
		}
	}
	return n
}
