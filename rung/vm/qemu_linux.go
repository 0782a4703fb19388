package vm

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"

	"github.com/dryexec/dryexec/wire"
)

// QEMUEnv names the QEMU binary to use instead of qemu-system-x86_64 on PATH.
const QEMUEnv = "DRYEXEC_QEMU"

// Accelerators.
const (
	AccelKVM = "kvm"
	AccelTCG = "tcg"
)

// FindQEMU returns QEMU: path, else $DRYEXEC_QEMU, else qemu-system-x86_64
// on PATH (Debian's qemu-system-x86, which `make deps` installs).
func FindQEMU(path string) (string, error) {
	path = cmpOr(path, os.Getenv(QEMUEnv))
	if path == "" {
		path = "qemu-system-x86_64"
	}
	p, err := exec.LookPath(path)
	if err != nil {
		return "", fmt.Errorf("QEMU: %w (`make deps` installs Debian's qemu-system-x86; or set %s)", err, QEMUEnv)
	}
	return p, nil
}

// transport carries the wire's streams between the host and the VM: one
// channel per wire.VMPorts name, each backed by a host descriptor that QEMU
// inherits. virtio-serial is the one there is; vsock (where
// /dev/vhost-vsock exists) would be another implementation, with the init
// finding its streams by port number instead of by name.
type transport interface {
	// Name says which it is, for notes.
	Name() string
	// Args returns QEMU's arguments for the streams at fds (in QEMU's
	// process), one per wire.VMPorts name, in that order.
	Args(fds []int) []string
}

// virtioSerial carries each stream on a virtio-serial port named
// wire.VMPortPrefix+name, backed by a socket chardev on a descriptor QEMU
// inherits (one end of a socketpair; the host holds the other). The guest's
// closing of a port is not seen by the host, but the host's closing of its
// end is seen in the VM as end-of-file, which is what stdin and the stub's
// request need; the host reads the command's output until QEMU has ended.
type virtioSerial struct{}

func (virtioSerial) Name() string { return "virtio-serial" }

func (virtioSerial) Args(fds []int) []string {
	args := []string{"-device", "virtio-serial-device,id=vser,max_ports=" + strconv.Itoa(len(fds)+1)}
	for i, name := range wire.VMPorts() {
		id := "dx" + strconv.Itoa(i)
		args = append(args,
			"-chardev", "socket,id="+id+",fd="+strconv.Itoa(fds[i]),
			"-device", "virtserialport,bus=vser.0,nr="+strconv.Itoa(i+1)+",chardev="+id+",name="+wire.VMPortPrefix+name)
	}
	return args
}

// vmConfig is one VM's QEMU command line.
type vmConfig struct {
	qemu      string
	accel     string
	kernel    string
	initramfs string
	memMB     int64
	cpus      int
	transport transport
	portFDs   []int
	// rootDir is the view QEMU exports over 9p (wire.VMRootTag), relative
	// to QEMU's working directory or absolute; "" exports none (the probe).
	rootDir string
	// netFD is QEMU's descriptor of netsim's frame socket (netArgs); 0: no
	// NIC (the probe).
	netFD int
	// session has the init start a session guest instead of a trial's.
	session bool
	// qmpFD is QEMU's descriptor of its monitor's socket (qmpArgs), and
	// incomingFD of a saved state to restore (-incoming); 0: none.
	qmpFD, incomingFD int
	// drives are virtio-blk drives (a trial's image and upper drives).
	drives []drive
}

// kernelArgs are the guest kernel's command line. tsc_early_khz: under TCG
// the kernel's calibration of the TSC against the PIT took seconds; a
// stated frequency skips it. panic=-1 and reboot=t: a guest that panics or
// whose init ends resets at once (by triple fault: microvm has no keyboard
// controller), and QEMU's -no-reboot makes a reset QEMU's exit. The rest
// (bootSkips) skips initcalls that cost the boot under TCG. What follows
// "--" is init's argv.
const kernelArgs = "console=ttyS0 quiet loglevel=3 panic=-1 reboot=t tsc_early_khz=2000000 tsc=reliable " +
	bootSkips + " rdinit=/init -- guest vm-init"

// bootSkips are the initcalls of Debian's kernel that cost the most under
// TCG (booted with initcall_debug: about 1.5 s of the kernel's 6 s before
// init, on a loaded host) and do nothing this VM uses; skipping them cut
// the kernel's CPU time to init by about a quarter (docs/benchmarks.md).
// None is part of the boundary, which is the VM's (QEMU and the host's
// kernel), not the guest kernel's: the command runs in the VM's user
// namespace, with no capability in the VM's own.
//
//   - cryptomgr.notests: the crypto self-tests (0.7 s). They check the
//     kernel's ciphers against known answers on this CPU; nothing of the
//     trial is encrypted in the VM (the wire, 9p and netsim's frames are
//     the host's sockets), and the host's boot of the same kernel runs
//     them. crypto_kdf108_init is the same for one KDF.
//   - load_system_certificate_list: parsing the kernel's built-in X.509
//     certificates, which verify module signatures. The VM loads only the
//     modules dryexec put in its initramfs from the host's /lib/modules
//     (Debian's kernel does not enforce signatures outside Secure Boot),
//     and the command cannot load any (no CAP_SYS_MODULE outside its user
//     namespace).
//   - init_kprobe_trace, init_encrypted, init_zswap: kprobe tracing's
//     files, the "encrypted" key type and zswap (the VM has no swap).
//
// Not skipped, though they cost as much: slab_sysfs_init (it also marks
// the slab allocator fully up) and btf_vmlinux_init (without
// /sys/kernel/btf every module load WARNs with a stack dump).
const bootSkips = "cryptomgr.notests initcall_blacklist=crypto_kdf108_init,load_system_certificate_list," +
	"init_kprobe_trace,init_encrypted,init_zswap"

func (c *vmConfig) argv() []string {
	accel := "tcg,tb-size=64"
	cpu := "max"
	if c.accel == AccelKVM {
		accel, cpu = "kvm", "host"
	}
	mem := c.memMB
	if mem <= 0 {
		mem = 512
	}
	cpus := max(c.cpus, 1)
	argv := []string{c.qemu,
		"-M", "microvm,rtc=on,pit=on",
		"-accel", accel, "-cpu", cpu,
		"-m", strconv.FormatInt(mem, 10) + "M", "-smp", strconv.Itoa(cpus),
		"-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
		// QEMU's own seccomp filter: it runs as root in the view guest's
		// mount namespace, serving the VM's 9p and virtio requests, so a
		// VM that broke into it would be root on the host. Denied: the
		// obsolete calls, any change of its ids, fork and exec, and
		// changes of scheduling or limits, none of which it needs.
		"-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
		// The console (kernel messages, the init's own errors) goes to
		// QEMU's stderr, which the host keeps the tail of.
		"-chardev", "file,id=con,path=/dev/stderr", "-serial", "chardev:con",
		"-kernel", c.kernel, "-initrd", c.initramfs, "-append", kernelArgs,
	}
	if c.session {
		argv[len(argv)-1] += " " + wire.RoleSession
	}
	if c.rootDir != "" {
		// passthrough: the VM's root acts on the view as root on the host
		// would (owners, modes, device nodes are real there); the view's
		// overlays put every write in the upper dirs. multidevs=remap:
		// the view spans several host mounts, whose inode numbers would
		// collide in the VM.
		argv = append(argv,
			"-fsdev", "local,id=root,path="+c.rootDir+",security_model=passthrough,multidevs=remap",
			"-device", "virtio-9p-device,fsdev=root,mount_tag="+wire.VMRootTag)
	}
	for i, d := range c.drives {
		argv = append(argv, d.args(i)...)
	}
	if c.netFD > 0 {
		argv = append(argv, netArgs(c.netFD)...)
	}
	argv = append(argv, c.transport.Args(c.portFDs)...)
	if c.qmpFD > 0 {
		argv = append(argv, qmpArgs(c.qmpFD)...)
	}
	if c.incomingFD > 0 {
		argv = append(argv, "-incoming", "fd:"+strconv.Itoa(c.incomingFD))
	}
	return argv
}
