package wire

// The vm rung's guest (RoleVMInit) is the init of a microVM. It finds
// its streams as virtio-serial ports named VMPortPrefix+name (VMPorts, in
// the order of the *FD constants: ctrl, stdout, stderr, stdin, stub), puts
// them at those descriptors, and then speaks the gvisor trial guest's verbs
// (VerbTrialStart, VerbTrialRun; VerbTrialExit, VerbTrialDone). Its root is
// the view the host exports over 9p with the tag VMRootTag; like the gvisor
// rung's, the upper dirs are on the host side and the host walks them once
// the VM is gone.
const (
	VMPortPrefix = "dryexec."
	VMRootTag    = "dryexec-root"
	// VMModules lists, one per line in load order, the kernel modules the
	// initramfs carries (as /lib/modules/NAME.ko) for the init to load.
	VMModules = "/dryexec-modules"
)

// VMPorts returns the virtio-serial ports' names, for CtrlFD, StdoutFD,
// StderrFD, StdinFD and StubFD in this order.
func VMPorts() []string { return []string{"ctrl", "stdout", "stderr", "stdin", "stub"} }
