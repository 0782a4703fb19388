// Package rungcompare owns the tests that hold a rung to the ns rung's
// delta: the same commands run through `dryexec run` (or a session) on
// both, compared field by field with timing aside. The gvisor and vm rungs'
// tests use it.
package rungcompare
