// Package firecracker is the vm rung's second VMM: a driver for Firecracker
// (https://firecracker-microvm.github.io), used where a `firecracker` binary
// exists and KVM really works.
//
// The package owns the host's side of one Firecracker process: a typed
// client for its REST API over the API unix socket (Client: machine config,
// boot source, drives, vsock, network interfaces, actions, pause/resume,
// snapshot create/load, instance info), launching the process (Launcher:
// `firecracker --api-sock PATH`, optionally under the jailer) and waiting
// for its socket, a Machine that puts the calls in the order Firecracker
// enforces (configure, start; pause, snapshot; load a snapshot into a fresh
// process), the host-initiated vsock handshake (Dial, VsockTransport) and
// the selection rule (Detect).
//
// It has not been run against a real Firecracker: the tests run it against
// fctest, a fake API server that checks every request against the published
// API spec and the ordering rules Firecracker enforces. See
// docs/architecture.md, "The vm rung", "Firecracker".
package firecracker
