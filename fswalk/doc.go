// Package fswalk is the guest half of the file delta: it walks an overlayfs
// upper directory inside the sandbox and reports each entry it holds (as
// wire.FSEntry) — files, directories, symlinks, FIFOs, whiteouts in both
// forms, opaque and redirected directories — reading overlay xattrs only in
// the namespace the overlay was mounted with. Its cost is O(what was
// written), never O(the tree), at any depth with a bounded number of fds.
// The host half, which trusts none of it, is package fsdelta; the two are
// apart so that the guest binary links no more than it needs. The walk is
// tested in fsdelta, through the differ, as the rungs use the two.
//
// WalkTree reports a plain dir tree the same way, against a Baseline of
// what it was before the command: the host rung's copy against its
// original, the seatbelt rung's clone against a snapshot.
package fswalk
