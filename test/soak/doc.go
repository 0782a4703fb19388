// Package soak holds the soak test of the daemon (soak_linux_test.go): a real
// `dryexec serve` driven through trials and sessions of mixed work, two at a
// time, after which nothing may be left (mounts, cgroups, network namespaces,
// processes, descriptors, temp dirs) and the daemon's memory must be flat.
// The short version runs with `go test ./...`; `make soak` runs the full one
// (DRYEXEC_SOAK=full). See docs/reliability.md.
package soak
