package wire

import "time"

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
	// VMImageSerial is the serial of the read-only virtio-blk drive that
	// holds a trial's OCI image as erofs: with it, the VM's root is an
	// overlay of its own over that image, its upper dir on a tmpfs of the
	// VM's, sent back as a tar on the writable drive VMUpperSerial (nothing
	// of the image goes over 9p). The tar keeps overlay's own marks, not a
	// layer's .wh. names, so that every name is a name: a whiteout is a
	// char device 0/0, an opaque dir's entry has the PAX record
	// VMUpperOpaque "y".
	// The serials are also the drives' ids on Firecracker (whose
	// virtio-blk gives the id as the serial), which allows only
	// [A-Za-z0-9_].
	VMImageSerial = "dryexec_image"
	VMUpperSerial = "dryexec_upper"
	// VMWorkSerial is a trial's writable drive, an ext4 the host made
	// (mkfs, never mounted on the host) that holds the VM's overlay upper
	// and work dirs: on a disk, not in the VM's RAM, so that what the
	// command writes is bounded by --upper-size, not by the VM's memory.
	// The guest takes all but the trial's --upper-size of its free blocks
	// with a file of its own, outside the upper dir.
	VMWorkSerial = "dryexec_work"
	// VMUpperMagic starts the upper drive once the tar at VMUpperOffset is
	// whole, followed by its length (8 bytes, little-endian): a VM that died
	// mid-export leaves the drive without it, and the host reads no tar.
	VMUpperMagic  = "dryexec-upper-v2"
	VMUpperOffset = 4096
	VMUpperOpaque = "DRYEXEC.overlay.opaque"
	// VMExportFailed starts the guest's console line on a failed export of
	// its upper dir, which the host quotes in its error.
	VMExportFailed = "dryexec vm-trial: exporting the upper dir: "
	// VMModules lists, one per line in load order, the kernel modules the
	// initramfs carries (as /lib/modules/NAME.ko) for the init to load.
	VMModules = "/dryexec-modules"
	// VMVsockParam on the VM kernel's command line has its init take the
	// streams from vsock instead of virtio-serial (a VMM without
	// virtio-serial: Firecracker): it listens on VMVsockPortBase+i for
	// stream i of VMPorts and accepts one connection on each, which the
	// host makes. The kernel leaves a dotted parameter to modules, so
	// init's argv is unchanged; init reads /proc/cmdline.
	VMVsockParam    = "dryexec.wire=vsock"
	VMVsockPortBase = 10000
)

// VMPorts returns the virtio-serial ports' names, for CtrlFD, StdoutFD,
// StderrFD, StdinFD and StubFD in this order.
func VMPorts() []string { return []string{"ctrl", "stdout", "stderr", "stdin", "stub"} }

// VerbVMAlive is the vm trial guest's heartbeat: a KindEvent with no body
// that it sends on the ctrl stream every VMAliveEvery from its hello until
// the trial ends. A VM that runs a command without a timeout may rightly be
// silent for hours otherwise; with the heartbeat the host can tell a
// sleeping command from a VM that stopped answering (QEMU stopped, the
// VM's kernel wedged) and end the trial rather than wait forever.
const VerbVMAlive = "vm.alive"

// VMAliveEvery is how often the vm trial guest sends VerbVMAlive.
const VMAliveEvery = 2 * time.Second
