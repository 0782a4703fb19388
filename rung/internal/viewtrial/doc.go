// Package viewtrial owns the host side of a trial in a sandbox that has a
// kernel of its own (the gvisor and vm rungs): the view guest's hand-shake
// and the view it builds on the host (trial.start, trial.mounts, the
// host's handle on its scratch tmpfs, the masks pinned through it), its
// exec into the sandbox's program, the conversation with the guest inside
// (trial.start, trial.run, the stub request, trial.exit, trial.done), and
// the delta, built by walking the upper dirs once the sandbox is gone.
// What starts the sandbox (runsc and its OCI bundle; QEMU and its
// transport) stays in each rung's package.
package viewtrial
