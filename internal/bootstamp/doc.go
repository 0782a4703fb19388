// Package bootstamp owns the stamps that remember, until the host's next
// boot, that a rung's probe passed (runsc started a sandbox, a VM booted),
// so that the probe, which costs about a trial, runs once per boot and per
// binary rather than before every `dryexec run`.
package bootstamp
