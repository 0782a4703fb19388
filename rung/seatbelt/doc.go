// Package seatbelt owns the `seatbelt` rung: trials (and sessions) on macOS
// under Seatbelt, the kernel sandbox that /usr/bin/sandbox-exec applies from
// a profile written in SBPL.
//
// A trial clones its working directory with clonefile(2) (APFS: a
// copy-on-write copy that costs metadata only), runs the command under
// sandbox-exec with a profile that lets it write only beneath the clone and
// a private tmp, denies reading the masked secrets and dryexec's own state,
// and denies the network but one loopback port, where netsim serves as the
// command's HTTP(S) proxy (net.go). Seatbelt's reports of what it denied
// (the unified log, told apart from other sandboxes' by a tag on the
// profile's deny rules) become the delta's secret violations and blocked
// network events (denials.go). Sessions get the same network, one netsim per
// session, its log split per exec (sessionnet.go), and fork by clones of the
// parent's dirs (sessiondirs.go); a session's guest runs unconfined and
// starts each command under sandbox-exec itself, with a profile that keeps
// the commands out of the baseline (session_darwin.go). A trial then walks
// the clone against a record of it taken before the command ran (an inode,
// ctime, mtime and size fast path) and hands what changed to package
// fsdelta as overlay-upper entries, so the delta is the one every other
// rung produces, and package commit applies it.
//
// What is platform-neutral here (the profile, the clone walk, the trial's
// steps, the proxy network, a session's network and dirs, the reading of
// denials, doctor's checks) is unit-tested on Linux with a plain copy in
// place of clonefile and no sandbox-exec. What is macOS-only
// (rung_darwin.go: clonefile, sandbox-exec, log stream, the APFS check,
// sessions, forks) has been compiled and vetted for darwin and has never run
// on a Mac, nor have the darwin halves of package fsdelta (the host read one
// name at a time with O_NOFOLLOW, in place of openat2) and of package commit
// (renameatx_np in place of renameat2), whose portable parts the Linux tests
// run (docs/architecture.md, "The seatbelt rung").
package seatbelt
