//go:build !linux

package guest

import (
	"fmt"
	"os"
)

func runNSTrial() int {
	fmt.Fprintln(os.Stderr, "dryexec guest: the ns rung needs Linux")
	return 2
}

func runStub([]string) int {
	fmt.Fprintln(os.Stderr, "dryexec guest: the command stub needs Linux")
	return 2
}

func runHostWalk([]string) int {
	fmt.Fprintln(os.Stderr, "dryexec guest: the host walk needs Linux")
	return 2
}

func runGVisorView() int {
	fmt.Fprintln(os.Stderr, "dryexec guest: the gvisor rung needs Linux")
	return 2
}

func runGVisorTrial() int { return runGVisorView() }

func runPIDInit([]string) int { return runGVisorView() }

func runVMInit([]string) int {
	fmt.Fprintln(os.Stderr, "dryexec guest: the vm rung needs Linux")
	return 2
}

func runVMTrial() int { return runVMInit(nil) }

func runImageView([]string) int {
	fmt.Fprintln(os.Stderr, "dryexec guest: image views need Linux")
	return 2
}
