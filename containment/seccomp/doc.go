// Package seccomp owns the system-call filter of the ns rung's sandboxed
// processes: the profile (which calls are refused, with which errno), its
// compilation to classic BPF for the native architecture (amd64, arm64; pure Go,
// no libseccomp), installing it on the calling OS thread with a user-notification
// listener, and the supervisor that answers the listener: every refused call is
// answered with its errno and reported as an Event (name, key arguments, pid,
// executable), so a refusal is never silent.
//
// The filter is a deny list with a ceiling: the calls listed in Default are
// refused (some only with particular arguments), every call number above the
// newest this package knows is refused with ENOSYS (so a syscall added to a
// later kernel is closed until someone looks at it), calls of a foreign ABI
// (i386 or x32 on amd64) are refused, and everything else is allowed. See
// docs/containment.md for the reasons.
package seccomp
