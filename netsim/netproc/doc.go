// Package netproc owns the parent's side of netsim's role process: the
// process that runs a sandbox's network simulator apart from the daemon or
// CLI that starts it, as runsc runs its gofer apart from its sentry. netsim
// parses traffic the sandbox controls (TCP/IP in gVisor's netstack, TLS,
// HTTP); a bug it triggers there should cost the trial's network, not the
// host process that holds the store, the signing key and root's
// capabilities.
//
// The parent (Start) re-executes a binary in the role, hands it the socket
// the sandbox's TUN device arrives on (StartEthernet: a datagram socket of
// a VM NIC's Ethernet frames, served as it is) and its configuration over a
// pipe (the CA, the resolved credentials and the mock file's rules: the
// role opens none of the caller's files except the mock file's directory),
// and reads the network log back as it is written. The role itself is
// package netsim/netrole (MaybeMain): it enters a Landlock domain prepared
// by the parent, drops to nobody where it started as root, installs a
// seccomp allow list on every thread and only then reads the first packet.
// This package links none of it, nor netsim's netstack: a program that
// starts the role without playing it (the local engine) does not pay for
// their initialisation. A crash or kill of the role ends the trial's
// network with an error the caller reports (ErrCrashed); it never reaches
// the parent. See docs/containment.md.
package netproc
