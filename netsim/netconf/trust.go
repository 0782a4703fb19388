package netconf

import (
	"os"

	"github.com/dryexec/dryexec/netsim/ca"
	"github.com/dryexec/dryexec/netsim/tun"
)

// Trust is what the sandbox needs to trust netsim's CA.
type Trust struct {
	// CAPEM is the CA certificate alone.
	CAPEM []byte
	// Bundle is the host's system trust store plus the CA: bind it (read
	// only) over BundlePath inside the sandbox.
	Bundle     []byte
	BundlePath string
	// Env points the common tools at BundlePath: SSL_CERT_FILE,
	// REQUESTS_CA_BUNDLE, CURL_CA_BUNDLE, NODE_EXTRA_CA_CERTS,
	// GIT_SSL_CAINFO, PIP_CERT.
	Env map[string]string
}

// TrustOf is the trust setup for a sandbox whose netsim signs with c (what
// Sim.Trust returns, for a caller whose Sim runs in another process).
func TrustOf(c *ca.CA) Trust {
	t := CATrustOf(c)
	system, _ := os.ReadFile(tun.SystemBundle)
	t.Bundle = c.Bundle(system)
	return t
}

// CATrustOf is TrustOf without Bundle, for a sandbox whose guest makes the
// bundle itself from the host's file at BundlePath and CAPEM
// (wire.TrialStart.TrustSystem): the host then does not read the system's
// roots, a few hundred KiB, for every sandbox.
func CATrustOf(c *ca.CA) Trust {
	return Trust{
		CAPEM:      c.CertPEM(),
		BundlePath: tun.SystemBundle,
		Env:        TrustEnv(tun.SystemBundle),
	}
}

// TrustEnv is the environment that points common tools at bundle.
func TrustEnv(bundle string) map[string]string {
	return map[string]string{
		"SSL_CERT_FILE":       bundle,
		"REQUESTS_CA_BUNDLE":  bundle,
		"CURL_CA_BUNDLE":      bundle,
		"NODE_EXTRA_CA_CERTS": bundle,
		"GIT_SSL_CAINFO":      bundle,
		"PIP_CERT":            bundle,
	}
}
