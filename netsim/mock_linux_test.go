package netsim_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/netsim"
	"github.com/dryexec/dryexec/netsim/ca"
	"github.com/dryexec/dryexec/netsim/mock/openapi"
)

const mockFile = `
routes:
  - host: api.example.com
    method: GET
    path: /users/{id}
    status: 200
    headers: {X-Mock: yes}
    json: {name: ada}
  - host: api.example.com
    path: /health
    status: 204
  - host: 203.0.113.7
    path: /raw
    status: 202
    body: raw-ok
  - host: secure.example.com
    path: /v1/*
    status: 201
    body: secure-ok
block:
  status: 451
  body: nope
`

func newSim(t testing.TB, cfg netsim.Config, files map[string]string) *netsim.Sim {
	t.Helper()
	dir := t.TempDir()
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if name == "mocks.yaml" {
			cfg.MockFile = filepath.Join(dir, name)
		}
	}
	if cfg.CADir == "" {
		cfg.CADir = filepath.Join(dir, "ca")
	}
	if cfg.OpenAPI == nil {
		cfg.OpenAPI = openapi.Load
	}
	if cfg.LookupHost == nil {
		// Never the machine's resolver.
		cfg.LookupHost = func(ctx context.Context, host string) ([]netipAddr, error) { return nil, errNoName(host) }
	}
	sim, err := netsim.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return sim
}

// findEvent returns the first event matching all non-empty fields of want.
func findEvent(log []dryexec.NetworkEvent, want dryexec.NetworkEvent) (dryexec.NetworkEvent, bool) {
	for _, e := range log {
		if (want.Proto == "" || e.Proto == want.Proto) && (want.Host == "" || e.Host == want.Host) &&
			(want.Action == "" || e.Action == want.Action) && (want.Method == "" || e.Method == want.Method) &&
			(want.URL == "" || e.URL == want.URL) && (want.Status == 0 || e.Status == want.Status) {
			return e, true
		}
	}
	return dryexec.NetworkEvent{}, false
}

func dumpLog(t testing.TB, log []dryexec.NetworkEvent) string {
	b, _ := json.MarshalIndent(log, "", " ")
	return string(b)
}

var trustEnv = []string{"SSL_CERT_FILE=$BUNDLE", "CURL_CA_BUNDLE=$BUNDLE", "REQUESTS_CA_BUNDLE=$BUNDLE"}

const pyGet = `import sys, urllib.request, urllib.error
try:
    r = urllib.request.urlopen(sys.argv[1], timeout=10)
    print(r.status, r.read().decode())
except urllib.error.HTTPError as e:
    print(e.code, e.read().decode())
`

const pyRaw = `import socket
s = socket.create_connection(("203.0.113.7", 80), timeout=10)
s.sendall(b"GET /raw HTTP/1.1\r\nHost: 203.0.113.7\r\nConnection: close\r\n\r\n")
data = b""
while True:
    b = s.recv(4096)
    if not b:
        break
    data += b
head, _, body = data.partition(b"\r\n\r\n")
print(head.split(b" ")[1].decode(), body.decode())
`

// TestMockedClients: real clients inside a sandbox get the mocked status and
// body over HTTP and HTTPS, and each request is logged as mocked.
func TestMockedClients(t *testing.T) {
	cases := []struct {
		name       string
		argv       []string
		opts       sandboxOpts
		wantOut    string
		wantURL    string
		wantStatus int
	}{
		{"curl http", []string{"curl", "-sS", "-w", " %{http_code}", "http://api.example.com/users/7"}, sandboxOpts{}, `{"name":"ada"} 200`, "http://api.example.com/users/7", 200},
		{"curl https", []string{"curl", "-sS", "-w", " %{http_code}", "https://secure.example.com/v1/x?q=1"}, sandboxOpts{env: trustEnv}, "secure-ok 201", "https://secure.example.com/v1/x?q=1", 201},
		{"curl https system trust store", []string{"curl", "-sS", "-w", " %{http_code}", "https://secure.example.com/v1/y"}, sandboxOpts{bindBundle: true}, "secure-ok 201", "https://secure.example.com/v1/y", 201},
		{"python http", []string{"/usr/bin/python3", "-c", pyGet, "http://api.example.com/users/1"}, sandboxOpts{}, `200 {"name":"ada"}`, "http://api.example.com/users/1", 200},
		{"python https", []string{"/usr/bin/python3", "-c", pyGet, "https://secure.example.com/v1/p"}, sandboxOpts{env: trustEnv}, "201 secure-ok", "https://secure.example.com/v1/p", 201},
		{"go https env", []string{"goclient", "get", "https://secure.example.com/v1/g"}, sandboxOpts{env: trustEnv}, "201 secure-ok", "https://secure.example.com/v1/g", 201},
		{"go https system trust store", []string{"goclient", "get", "https://secure.example.com/v1/s"}, sandboxOpts{bindBundle: true}, "201 secure-ok", "https://secure.example.com/v1/s", 201},
		{"python raw socket to a literal address", []string{"/usr/bin/python3", "-c", pyRaw}, sandboxOpts{}, "202 raw-ok", "http://203.0.113.7/raw", 202},
		{"unmatched gets the block response", []string{"curl", "-sS", "-w", " %{http_code}", "http://api.example.com/nothing"}, sandboxOpts{}, "nope 451", "http://api.example.com/nothing", 451},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sim := newSim(t, netsim.Config{}, map[string]string{"mocks.yaml": mockFile})
			res := runSandbox(t, sim, tc.opts, tc.argv...)
			if res.code != 0 || !strings.Contains(res.stdout, tc.wantOut) {
				t.Fatalf("exit %d, stdout %q (want %q), stderr %s\nlog: %s", res.code, res.stdout, tc.wantOut, res.stderr, dumpLog(t, sim.Log()))
			}
			action := netsim.ActionMocked
			if tc.wantStatus == 451 {
				action = netsim.ActionBlocked
			}
			ev, ok := findEvent(sim.Log(), dryexec.NetworkEvent{URL: tc.wantURL, Action: action, Status: tc.wantStatus})
			if !ok {
				t.Fatalf("no %s event for %s in %s", action, tc.wantURL, dumpLog(t, sim.Log()))
			}
			if ev.BytesIn == 0 {
				t.Errorf("bytes_in = 0 for %+v", ev)
			}
			if !strings.Contains(tc.wantURL, "203.0.113.7") {
				if _, ok := findEvent(sim.Log(), dryexec.NetworkEvent{Proto: "dns", Method: "A", Action: netsim.ActionMocked}); !ok {
					t.Errorf("no DNS event: %s", dumpLog(t, sim.Log()))
				}
			}
		})
	}
}

// TestUntrustedCA: a client that does not trust the netsim CA fails the
// handshake (it is never answered in clear), and the attempt is logged.
func TestUntrustedCA(t *testing.T) {
	sim := newSim(t, netsim.Config{}, map[string]string{"mocks.yaml": mockFile})
	// curl trusts another CA only: it loads it, connects and refuses the
	// netsim CA's certificate. (With an empty bundle, /dev/null, curl
	// sometimes gave up before connecting, exit 77, and netsim saw no
	// handshake at all.)
	other, err := ca.LoadOrCreate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	bundle := filepath.Join(t.TempDir(), "other-ca.pem")
	if err := os.WriteFile(bundle, other.CertPEM(), 0o644); err != nil {
		t.Fatal(err)
	}
	res := runSandbox(t, sim, sandboxOpts{env: []string{"CURL_CA_BUNDLE=" + bundle}}, "curl", "-sS", "https://secure.example.com/v1/x")
	if res.code == 0 || strings.Contains(res.stdout, "secure-ok") {
		t.Fatalf("exit %d stdout %q", res.code, res.stdout)
	}
	ev, ok := findEvent(sim.Log(), dryexec.NetworkEvent{Proto: "https", Host: "secure.example.com", Action: netsim.ActionBlocked})
	if !ok || !strings.Contains(ev.Reason, "TLS handshake failed") {
		t.Fatalf("event %+v in %s (curl exit %d, stderr %q)", ev, dumpLog(t, sim.Log()), res.code, res.stderr)
	}
}
