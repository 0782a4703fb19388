//go:build dryexec_testhooks

package testhooks

// Enabled says the test hooks are compiled in.
const Enabled = true
