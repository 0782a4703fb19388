package netsim

import (
	"github.com/dryexec/dryexec/netsim/ca"
	"github.com/dryexec/dryexec/netsim/netconf"
)

// The configuration and the trust set-up are package netconf's, which
// links no netstack (the host side of netsim's role process needs them
// alone); these aliases keep them netsim's for every other caller, and
// ErrBadConfig the same error value, so errors.Is matches either name.
type (
	// Config is netconf.Config.
	Config = netconf.Config
	// Rule is netconf.Rule.
	Rule = netconf.Rule
	// Secret is netconf.Secret.
	Secret = netconf.Secret
	// Trust is netconf.Trust.
	Trust = netconf.Trust
)

// ErrBadConfig is netconf.ErrBadConfig.
var ErrBadConfig = netconf.ErrBadConfig

// SeedOf is netconf.SeedOf.
func SeedOf(id string) uint64 { return netconf.SeedOf(id) }

// ParseRules is netconf.ParseRules.
func ParseRules(s string) ([]Rule, error) { return netconf.ParseRules(s) }

// TrustOf is netconf.TrustOf.
func TrustOf(c *ca.CA) Trust { return netconf.TrustOf(c) }

// CATrustOf is netconf.CATrustOf.
func CATrustOf(c *ca.CA) Trust { return netconf.CATrustOf(c) }

// TrustEnv is netconf.TrustEnv.
func TrustEnv(bundle string) map[string]string { return netconf.TrustEnv(bundle) }
