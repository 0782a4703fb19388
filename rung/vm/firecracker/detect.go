package firecracker

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
)

// BinaryEnv names the firecracker binary to use instead of `firecracker`
// on PATH.
const BinaryEnv = "DRYEXEC_FIRECRACKER"

// Detection is the selection rule's answer.
type Detection struct {
	// Binary is the firecracker found ("" when none).
	Binary string
	// Use: the vm rung should boot its VMs with Firecracker.
	Use bool
	// Why says why not (or, when Use, how it was decided), for doctor.
	Why string
}

// KVMProbe boots a probe VM with KVM and returns nil only if it greeted
// within its deadline: the vm rung's boot probe.
type KVMProbe func(ctx context.Context) error

// Detect is the rule for choosing Firecracker over QEMU: Linux, a
// firecracker binary (binary, else $DRYEXEC_FIRECRACKER, else
// `firecracker` on PATH), and KVM that really works — which only booting a
// VM shows: probe decides, and /dev/kvm is never merely opened (on a
// nested hypervisor it opens and VMs then hang; Firecracker has no TCG to
// fall back on). The probe runs only when there is a binary.
func Detect(ctx context.Context, binary string, probe KVMProbe) Detection {
	if runtime.GOOS != "linux" {
		return Detection{Why: "Firecracker runs on Linux only"}
	}
	if binary == "" {
		binary = os.Getenv(BinaryEnv)
	}
	if binary == "" {
		binary = "firecracker"
	}
	p, err := exec.LookPath(binary)
	if err != nil {
		return Detection{Why: fmt.Sprintf("no firecracker binary (%v; set %s)", err, BinaryEnv)}
	}
	if probe == nil {
		return Detection{Binary: p, Why: "KVM not probed"}
	}
	if err := probe(ctx); err != nil {
		return Detection{Binary: p, Why: "KVM does not boot a VM: " + oneLine(err.Error())}
	}
	return Detection{Binary: p, Use: true, Why: "firecracker at " + p + "; a probe VM booted with KVM"}
}

// oneLine is s's first line, at most 300 bytes of it.
func oneLine(s string) string {
	for i, r := range s {
		if r == '\n' {
			s = s[:i]
			break
		}
	}
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}
