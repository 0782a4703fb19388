// Package escape is the escape corpus: scripted attempts to break out of an ns
// trial, each a test that runs inside a real trial and asserts that
//
//	(a) the host is unchanged: a canary in the trial's directory, a root-only
//	    target file beside it, and whatever the attempt aimed at;
//	(b) the attempt failed: a script prints ESCAPED only if its attack worked;
//	(c) the refusal is visible: a violation of the expected kind in the delta,
//	    or, where the kernel itself refuses and nothing can report it, the
//	    error the command saw in its output, or the write captured as a file
//	    change instead of reaching the host.
//
// Attempts that could harm this machine if the boundary failed (bombs, device
// nodes) run under outer bounds too: the test's context, the trial's timeout,
// and the cgroup limits; device nodes are only opened, never written.
//
// The corpus runs as root and again as an unprivileged user (TestRootless
// re-runs it through setpriv as uid 65534), because the two modes build the
// boundary differently.
package escape
