// Package fidelity is a differential harness: it runs realistic agent
// workloads (git, python venv and pip, npm, make, go build, tar, rsync, …)
// natively and as dryexec trials in identical trees, and checks that
//
//	(a) the trial's delta says exactly what the native run changed (a scan of
//	    the native tree before and after), and
//	(b) the tree after committing the trial is the tree the native run left:
//	    content, modes, kinds, owners, symlink targets, hard-link identity,
//	    FIFOs, mtimes where they are deterministic, and the command's exit
//	    code and output.
//
// What it does not compare, and why, is one table (ignored, in ignore_test.go
// and docs/fidelity.md); workloads that differ today, and why, are another
// (knownDiffering). Every other difference fails the test. `make fidelity`
// runs it as root and as uid 65534 and writes bench/results/fidelity.md.
package fidelity
