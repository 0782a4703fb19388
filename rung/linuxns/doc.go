// Package linuxns is the `ns` rung: each trial runs in fresh Linux user, mount, pid,
// net, ipc, uts and cgroup namespaces, over an overlayfs view of every real host
// mount, with the guest supervisor (package guest) as PID 1. It owns the host side
// of that rung: deciding what to overlay, starting the guest, feeding the guest's
// report through fsdelta.Differ, and assembling the StateDelta.
package linuxns
