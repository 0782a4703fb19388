//go:build !unix

package policy

func cpuTime() int64 { return -1 }
