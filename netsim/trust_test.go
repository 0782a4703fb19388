package netsim

import (
	"context"
	"crypto/x509"
	"strings"
	"testing"

	"github.com/dryexec/dryexec/netsim/tun"
)

// TestTrust: the sandbox's trust set-up names every variable the issue
// lists, points them at the bundle path, and the bundle holds the CA.
func TestTrust(t *testing.T) {
	s, err := New(context.Background(), Config{CADir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	tr := s.Trust()
	for _, v := range []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "GIT_SSL_CAINFO", "PIP_CERT"} {
		if tr.Env[v] != tun.SystemBundle {
			t.Errorf("%s = %q", v, tr.Env[v])
		}
	}
	if tr.BundlePath != tun.SystemBundle || !strings.HasSuffix(string(tr.Bundle), string(tr.CAPEM)) {
		t.Fatalf("bundle path %q, CA not at the end of the bundle", tr.BundlePath)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(tr.CAPEM) {
		t.Fatal("CA PEM does not parse")
	}
}
