// Package fault holds the fault-injection tests of the daemon, the CLI and
// the store (fault_linux_test.go): SIGKILL of `dryexec serve` mid-trial,
// mid-session-exec and mid-commit, SIGKILL of `dryexec run` mid-trial, a full
// state directory, and a corrupted stored trial. Each case checks that the
// next start cleans what was left, that other trials are unharmed, that no
// commit is half-applied, and that errors say what happened. See
// docs/reliability.md.
package fault
