package hostproc

import "syscall"

// attr: a session of its own (macOS has no parent-death signal).
func attr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Setsid: true} }

// maxRSSBytes: macOS counts ru_maxrss in bytes.
func maxRSSBytes(ru *syscall.Rusage) int64 { return ru.Maxrss }

// KillSession kills the process group the session's leader sid leads
// (macOS has no /proc to find the session's other groups by).
func KillSession(sid int) { syscall.Kill(-sid, syscall.SIGKILL) }
