// Package harness runs a real `dryexec serve` in a process of its own for the
// soak (test/soak) and fault-injection (test/fault) tests, talks to it over
// its unix socket, and takes inventory of what a daemon could leak on the
// host: mounts, cgroups, network namespaces, processes, descriptors, temp
// dirs. It is a test helper: only _test files import it.
//
// The daemon is the test binary itself acting as the CLI (Main), so the
// daemon under test is built from this tree with whatever flags the test was
// (-race included) and can be SIGKILLed at will.
package harness
