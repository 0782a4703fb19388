// Package netrole owns netsim's role process itself: MaybeMain, which a
// binary calls first thing in main so that package netsim/netproc can
// start it as the role; the role's reading of its Setup, its confinement
// (the uid drop, the seccomp allow list) and its serving of the sandbox's
// link with netsim. It is apart from netproc, the parent's side, because it
// links netsim's netstack (gVisor): a program that only starts the role
// (the local engine, cmd/dryexec-local) then does not link it, nor pay for
// its initialisation at each start. See netproc's doc for the protocol and docs/containment.md for the
// confinement.
package netrole
