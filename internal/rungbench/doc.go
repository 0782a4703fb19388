// Package rungbench owns the interleaved benchmark of a rung against
// others on the same machine at the same moment: candidates (a rung's
// trial, bwrap, `runsc do`) timed in turn in each iteration, and their
// medians. The rungs' benchmarks and bench/cmd/trialbench use it.
package rungbench
