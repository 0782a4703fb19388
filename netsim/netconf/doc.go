// Package netconf owns what a sandbox's network is asked to do and what the
// sandbox is given to trust: the configuration (Config, allow rules, the
// --net values that build them), ErrBadConfig, and the CA trust set-up
// (Trust). It holds none of the netstack that does it (package netsim), so
// that a program that only starts netsim's role process (package
// netsim/netproc) or checks a --net value does not link gVisor: the local
// engine (cmd/dryexec-local) pays for every package it links at each start
// (docs/architecture.md, "The front and the engine"). Nor does it read mock
// files (package netsim/mockfile, which links a YAML decoder). Package
// netsim keeps these names as aliases.
package netconf
