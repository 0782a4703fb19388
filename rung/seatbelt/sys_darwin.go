package seatbelt

import "syscall"

// maxRSSBytes: macOS counts ru_maxrss in bytes (Linux in KiB).
func maxRSSBytes(ru *syscall.Rusage) int64 { return ru.Maxrss }
