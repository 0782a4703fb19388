package vm

import (
	"strings"
	"time"

	"github.com/dryexec/dryexec/rung/linuxns"
)

// kernelPanicked is the VM kernel's panic line from the console
// ("Kernel panic - not syncing: …"), or "" if it did not panic. QEMU has
// ended (panic=-1 and -no-reboot make a panic its exit): the console's
// copier is given GuestExitWait to read QEMU's last output first.
func (t *trial) kernelPanicked() string {
	drained := make(chan struct{})
	go func() {
		t.Pipes.Wait()
		close(drained)
	}()
	select {
	case <-drained:
	case <-time.After(linuxns.GuestExitWait):
	}
	return kernelPanic(tailString(t.console))
}

// kernelPanic is the kernel's panic line in console, or "".
func kernelPanic(console string) string {
	i := strings.LastIndex(console, "Kernel panic - ")
	if i < 0 {
		return ""
	}
	line, _, _ := strings.Cut(console[i:], "\n")
	return strings.TrimSpace(line)
}
