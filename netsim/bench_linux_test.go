package netsim_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"

	"github.com/dryexec/dryexec/netsim"
	"github.com/dryexec/dryexec/netsim/ca"
)

// BenchmarkMockedHTTPS measures mocked HTTPS requests from a Go client inside
// a sandbox (its own network namespace, TUN, netstack, TLS termination,
// mock, log). The client times its own loop, so ns/req and req/s exclude the
// sandbox's start; the framework's ns/op includes it. Compare with
// BenchmarkDirectHTTPS, the same client against a loopback server without
// netsim: the difference is netsim's added latency.
func BenchmarkMockedHTTPS(b *testing.B) {
	cases := []struct{ name, mode, url string }{
		{"keepalive", "keepalive", "https://bench.example.com/ping"},
		{"new", "new", "https://bench.example.com/ping"},
		// A literal address: no DNS lookup per connection (Go's resolver
		// does not cache), so this is the connection cost alone.
		{"new-literal", "new", "https://203.0.113.10/ping"},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			sim := newSim(b, netsim.Config{MaxEvents: 1 << 20}, map[string]string{"mocks.yaml": "routes:\n  - path: /ping\n    body: pong\n"})
			res := runSandbox(b, sim, sandboxOpts{env: trustEnv}, "goclient", "bench", strconv.Itoa(b.N), tc.mode, tc.url)
			ns, err := strconv.ParseFloat(strings.TrimSpace(res.stdout), 64)
			if err != nil {
				b.Fatalf("client: %q %s", res.stdout, res.stderr)
			}
			b.ReportMetric(ns/float64(b.N), "ns/req")
			b.ReportMetric(float64(b.N)/(ns/1e9), "req/s")
		})
	}
}

// BenchmarkDirectHTTPS is the baseline: the same client loop against an
// HTTPS server on loopback, no sandbox, no netsim.
func BenchmarkDirectHTTPS(b *testing.B) {
	// The same kind of certificate netsim serves (ECDSA P-256 from a CA),
	// so the handshakes cost the same.
	authority, err := ca.LoadOrCreate(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	leaf, err := authority.Leaf("127.0.0.1")
	if err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, "pong") }))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}, NextProtos: []string{"http/1.1"}}
	srv.StartTLS()
	defer srv.Close()
	pool := x509.NewCertPool()
	pool.AddCert(authority.Certificate())
	for _, mode := range []string{"keepalive", "new"} {
		b.Run(mode, func(b *testing.B) {
			cl := &http.Client{Transport: &http.Transport{DisableKeepAlives: mode == "new", TLSClientConfig: &tls.Config{RootCAs: pool}}}
			if err := get(cl, srv.URL); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				if err := get(cl, srv.URL); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "req/s")
		})
	}
}
