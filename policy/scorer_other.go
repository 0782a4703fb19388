//go:build !unix

package policy

import "os/exec"

// killGroup: without process groups, only the scorer itself is killed.
func killGroup(*exec.Cmd) {}
