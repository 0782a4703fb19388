package seatbelt

import "syscall"

// maxRSSBytes: Linux counts ru_maxrss in KiB.
func maxRSSBytes(ru *syscall.Rusage) int64 { return ru.Maxrss << 10 }
