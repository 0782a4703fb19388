//go:build linux

package main

import (
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/netsim/ca"
	"github.com/dryexec/dryexec/netsim/tun"
	"github.com/dryexec/dryexec/rung/linuxns"
)

// httpsClientArg makes this binary the HTTPS client the network group runs,
// inside a trial and outside: `trialbench https-client N keepalive|new URL`
// makes one warm-up request (DNS, the first certificate), then N timed ones,
// and prints the nanoseconds the N took. The client times its own loop, so
// a trial's start and end are not in the rate (the same idea as netsim's
// BenchmarkMockedHTTPS). It trusts what SSL_CERT_FILE names: inside a trial,
// netsim's CA (the rung sets it); outside, the baseline server's CA.
const httpsClientArg = "https-client"

func httpsClient(args []string) int {
	if len(args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: https-client N keepalive|new URL")
		return 2
	}
	n, err := strconv.Atoi(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	cl := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DisableKeepAlives: args[1] == "new"}}
	get := func() error {
		resp, err := cl.Get(args[2])
		if err != nil {
			return err
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("status %d", resp.StatusCode)
		}
		return nil
	}
	if err := get(); err != nil {
		fmt.Fprintln(os.Stderr, "warm-up:", err)
		return 1
	}
	start := time.Now()
	for range n {
		if err := get(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			return 1
		}
	}
	fmt.Println(time.Since(start).Nanoseconds())
	return 0
}

// Requests per sample: enough that the loop, not the client's start,
// dominates, few enough for the 8-minute budget.
const (
	keepAliveRequests = 200
	newConnRequests   = 40
)

// netGroup: mocked HTTPS requests per second from inside a trial (netsim's
// netstack, TLS termination with a per-host certificate, the mock, the log)
// against the same client talking straight to a loopback HTTPS server with
// the same kind of certificate, with keep-alive and with a new connection per
// request.
func netGroup(e *env) ([]group, error) {
	g := group{key: "net", title: "Mocked HTTPS from inside a trial vs direct loopback HTTPS (same Go client)",
		unit: rate("req/s"), bases: []int{0, 1}}
	if os.Getenv(inNetNS) == "" {
		return []group{g}, fmt.Errorf("%w: needs root, to run in a network namespace of its own", errSkip)
	}
	if err := tun.CheckTUN(); err != nil {
		return []group{g}, fmt.Errorf("%w: no usable /dev/net/tun: %v", errSkip, err)
	}
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	// The baseline server: a certificate from a CA of the same kind netsim
	// uses (ECDSA P-256), so the handshakes cost the same.
	authority, err := ca.LoadOrCreate(filepath.Join(e.work, "direct-ca"))
	if err != nil {
		return nil, err
	}
	leaf, err := authority.Leaf("127.0.0.1")
	if err != nil {
		return nil, err
	}
	caFile := filepath.Join(e.work, "direct-ca.pem")
	if err := os.WriteFile(caFile, authority.CertPEM(), 0o644); err != nil {
		return nil, err
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "pong") }))
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{*leaf}, NextProtos: []string{"http/1.1"}}
	srv.StartTLS()
	e.onExit(srv.Close)

	mocks := filepath.Join(e.work, "mocks.yaml")
	if err := os.WriteFile(mocks, []byte("routes:\n  - path: /ping\n    body: pong\n"), 0o644); err != nil {
		return nil, err
	}
	r := &linuxns.Rung{}
	const url = "https://bench.example.com/ping"
	inTrial := func(n int, mode string) func() (float64, error) {
		return func() (float64, error) {
			d, err := r.Trial(e.ctx, dryexec.TrialSpec{Net: []string{"mock:" + mocks}, NetCADir: filepath.Join(e.work, "netsim-ca"),
				Action: dryexec.Action{Argv: []string{self, httpsClientArg, strconv.Itoa(n), mode, url}, Cwd: e.empty, Env: benchEnv, TimeoutMS: 120_000}})
			if err := checkDelta(d, err); err != nil {
				return 0, err
			}
			return perSecond(n, d.Process.Stdout)
		}
	}
	direct := func(n int, mode string) func() (float64, error) {
		return func() (float64, error) {
			c := exec.Command(self, httpsClientArg, strconv.Itoa(n), mode, srv.URL+"/ping")
			c.Env = []string{"PATH=/usr/bin:/bin", "SSL_CERT_FILE=" + caFile}
			out, err := c.Output()
			if err != nil {
				return 0, fmt.Errorf("direct client: %w", err)
			}
			return perSecond(n, string(out))
		}
	}
	g.cands = []candidate{
		{name: fmt.Sprintf("direct, keep-alive (%d requests)", keepAliveRequests), label: "direct keep-alive", run: direct(keepAliveRequests, "keepalive")},
		{name: fmt.Sprintf("direct, new connection each (%d requests)", newConnRequests), label: "direct new", run: direct(newConnRequests, "new")},
		{name: fmt.Sprintf("trial → netsim mock, keep-alive (%d requests)", keepAliveRequests), run: inTrial(keepAliveRequests, "keepalive")},
		{name: fmt.Sprintf("trial → netsim mock, new connection each (%d requests)", newConnRequests), run: inTrial(newConnRequests, "new")},
	}
	g.note = "Compare keep-alive with keep-alive and new connections with new connections; the other ratio column is there for completeness. " +
		"The trial's rows resolve bench.example.com through netsim's DNS on every new connection (Go does not cache lookups)."
	return []group{g}, nil
}

// perSecond turns the client's printed nanoseconds for n requests into a rate.
func perSecond(n int, out string) (float64, error) {
	ns, err := strconv.ParseFloat(strings.TrimSpace(out), 64)
	if err != nil || ns <= 0 {
		return 0, fmt.Errorf("client printed %q", out)
	}
	return float64(n) / (ns / 1e9), nil
}
