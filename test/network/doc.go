// Package network holds the end-to-end tests of the simulated network
// (package netsim) as trials, sessions and the HTTP API use it: real clients
// (curl, python, Go) inside ns sandboxes against mocks, allow rules, DNS and
// credential injection, on a network namespace of the tests' own. It has
// tests only.
package network
