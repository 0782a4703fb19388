// Package vm is the `vm` rung: each trial's command runs in a microVM of its
// own (QEMU's microvm machine), under a Linux kernel of the sandbox's own.
//
// The package owns what a VM needs and the host side of a trial: finding the
// kernel (an uncompressed vmlinux, extracted from the distribution's
// compressed one once and cached by digest), the initramfs dryexec builds
// (the static guest supervisor as /init and the virtio modules the kernel
// lacks, cached by digest), QEMU's command line, the accelerator probe (KVM
// only if a probe VM really boots with it, else TCG) and the trial. As on
// the gvisor rung, the file delta comes from overlays dryexec owns on the
// host: the view guest (wire.RoleGVisorView) builds them and becomes QEMU,
// which exports the view to the VM over 9p; the VM's init
// (wire.RoleVMInit) mounts it as its root and runs the command; once the VM
// is gone the host walks the upper dirs. The VM's network is ns's netsim
// behind a virtio-net device whose frames QEMU passes on a socket netsim
// serves (net_linux.go). The VMM is QEMU; Firecracker (package
// firecracker) is chosen only where a Firecracker probe VM greets over
// vsock, and runs no trial yet (vmm_linux.go). See docs/architecture.md,
// "The vm rung".
package vm
