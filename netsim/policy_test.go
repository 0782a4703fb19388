package netsim

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"strings"
	"testing"
)

func simWith(t *testing.T, rules []Rule, dns map[string][]string) *Sim {
	t.Helper()
	cfg := Config{CADir: t.TempDir(), Allow: rules, LookupHost: func(_ context.Context, host string) ([]netip.Addr, error) {
		var out []netip.Addr
		for _, a := range dns[host] {
			out = append(out, netip.MustParseAddr(a))
		}
		if out == nil {
			return nil, errors.New("no such host")
		}
		return out, nil
	}}
	s, err := New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestDecide: the allow-rule decision, including the attempts to reach
// private addresses through names, wildcards and literal addresses.
func TestDecide(t *testing.T) {
	dns := map[string][]string{
		"api.example.com":        {"93.184.216.34"},
		"rebind.example.com":     {"127.0.0.1", "93.184.216.35"},
		"internal.example.com":   {"10.1.2.3"},
		"metadata.example.com":   {"169.254.169.254"},
		"v6local.example.com":    {"::1"},
		"mapped.example.com":     {"::ffff:127.0.0.1"},
		"cgnat.example.com":      {"100.100.100.200"},
		"synthetic.example.com":  {"198.18.0.5"},
		"db.example.com":         {"10.9.9.9"},
		"deep.cdn.example.com":   {"93.184.216.36"},
		"localhost-ish.internal": {"127.0.0.2"},
	}
	rules := []Rule{
		{Host: "api.example.com", Port: 443},
		{Host: "*.example.com"},
		{Host: "10.9.9.9", Port: 5432},
		{Host: "get.only.test", Methods: []string{"GET"}, PathPrefix: "/v1/"},
	}
	s := simWith(t, rules, dns)
	name := func(n string, port int) flow {
		return flow{name: n, port: port, proto: "tcp", addr: netip.MustParseAddr("198.18.0.1")}
	}
	lit := func(a string, port int) flow { return flow{addr: netip.MustParseAddr(a), port: port, proto: "tcp"} }
	cases := []struct {
		name         string
		f            flow
		method, path string
		allowed      bool
		dial         string
		reason       string
	}{
		{"exact name", name("api.example.com", 443), "GET", "/", true, "93.184.216.34", "api.example.com:443"},
		{"wildcard", name("deep.cdn.example.com", 80), "GET", "/", true, "93.184.216.36", "*.example.com"},
		{"wildcard does not match the apex", name("example.com", 80), "GET", "/", false, "", "no allow rule"},
		{"name resolving to loopback skips to a public address", name("rebind.example.com", 80), "GET", "/", true, "93.184.216.35", ""},
		{"name resolving to private", name("internal.example.com", 80), "GET", "/", false, "", "private"},
		{"name resolving to metadata", name("metadata.example.com", 80), "GET", "/", false, "", "link-local"},
		{"name resolving to v6 loopback", name("v6local.example.com", 80), "GET", "/", false, "", "loopback"},
		{"name resolving to v4-mapped loopback", name("mapped.example.com", 80), "GET", "/", false, "", "loopback"},
		{"name resolving to CGNAT metadata", name("cgnat.example.com", 80), "GET", "/", false, "", "shared"},
		{"name resolving into netsim's own range", name("synthetic.example.com", 80), "GET", "/", false, "", "benchmarking"},
		{"name resolving to a named address and port", name("db.example.com", 5432), "", "", true, "10.9.9.9", "10.9.9.9:5432"},
		{"named address, other port", name("db.example.com", 5433), "", "", false, "", "private"},
		{"literal named address", lit("10.9.9.9", 5432), "", "", true, "10.9.9.9", ""},
		{"literal address never matches a name rule", lit("93.184.216.34", 443), "GET", "/", false, "", "no allow rule"},
		{"literal loopback", lit("127.0.0.1", 80), "GET", "/", false, "", "no allow rule"},
		{"method rule: GET in prefix", name("get.only.test", 80), "GET", "/v1/x", false, "", "resolving get.only.test"},
		{"method rule: POST refused before resolving", name("get.only.test", 80), "POST", "/v1/x", false, "", "no allow rule"},
		{"method rule: raw TCP refused", name("get.only.test", 80), "", "", false, "", "no allow rule"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := s.decide(context.Background(), tc.f, tc.method, tc.path)
			if d.allowed != tc.allowed || (tc.dial != "" && d.dial.String() != tc.dial) || !strings.Contains(d.reason, tc.reason) {
				t.Fatalf("decision %+v, want allowed=%v dial=%s reason~%q", d, tc.allowed, tc.dial, tc.reason)
			}
		})
	}
}

func TestParseRules(t *testing.T) {
	cases := []struct {
		in   string
		want []Rule
		err  bool
	}{
		{"example.com", []Rule{{Host: "example.com"}}, false},
		{"example.com:443,*.github.com", []Rule{{Host: "example.com", Port: 443}, {Host: "*.github.com"}}, false},
		{"127.0.0.1:8080/api/", []Rule{{Host: "127.0.0.1", Port: 8080, PathPrefix: "/api/"}}, false},
		{"[::1]:80", []Rule{{Host: "::1", Port: 80}}, false},
		{"", nil, true},
		{"*", nil, true},
		{"*.10.0.0.1", nil, true},
		{"example.com:0", nil, true},
		{"example.com:99999", nil, true},
		{"exa mple.com", nil, true},
		{"[::1", nil, true},
		{"[nothost]:80", nil, true},
	}
	for _, tc := range cases {
		got, err := ParseRules(tc.in)
		if (err != nil) != tc.err {
			t.Errorf("%q: err %v", tc.in, err)
			continue
		}
		if err != nil {
			if !errors.Is(err, ErrBadConfig) {
				t.Errorf("%q: %v is not ErrBadConfig", tc.in, err)
			}
			continue
		}
		if len(got) != len(tc.want) {
			t.Errorf("%q: %+v", tc.in, got)
			continue
		}
		for i := range got {
			if got[i].Host != tc.want[i].Host || got[i].Port != tc.want[i].Port || got[i].PathPrefix != tc.want[i].PathPrefix {
				t.Errorf("%q: %+v want %+v", tc.in, got[i], tc.want[i])
			}
		}
	}
}

func TestAddSpec(t *testing.T) {
	cases := []struct {
		specs []string
		mode  string
		err   bool
	}{
		{[]string{"none"}, "none", false},
		{[]string{"mock:m.yaml"}, "mock", false},
		{[]string{"allow:a.com"}, "allow", false},
		{[]string{"mock:m.yaml", "allow:a.com,b.com:22"}, "mock+allow", false},
		{[]string{"mock:m.yaml", "none"}, "", true},
		{[]string{"none", "none"}, "none", false},
		{[]string{"allow:a.com", "none"}, "", true},
		{[]string{"none", "allow:a.com"}, "", true},
		{[]string{"none", "mock:m.yaml"}, "", true},
		{[]string{"none", "mock:m.yaml", "allow:a.com"}, "", true},
		{[]string{"allow:127.0.0.1:8080"}, "", true},
		{[]string{"allow:127.1.2.3"}, "", true},
		{[]string{"allow:[::1]:8080"}, "", true},
		{[]string{"allow:[::ffff:127.0.0.1]:80"}, "", true},
		{[]string{"allow:0.0.0.0:80"}, "", true},
		{[]string{"allow:localhost:5432"}, "", true},
		{[]string{"allow:LOCALHOST."}, "", true},
		{[]string{"allow:db.localhost"}, "", true},
		{[]string{"allow:example.com,127.0.0.1:80"}, "", true},
		{[]string{"allow:10.0.0.5:5432"}, "allow", false},
		{[]string{"mock:"}, "", true},
		{[]string{"mock:a", "mock:b"}, "", true},
		{[]string{"allow:"}, "", true},
		{[]string{"everything"}, "", true},
	}
	for _, tc := range cases {
		var c Config
		var err error
		for _, s := range tc.specs {
			if err = c.AddSpec(s); err != nil {
				break
			}
		}
		if (err != nil) != tc.err || (!tc.err && c.Mode() != tc.mode) {
			t.Errorf("%v: mode %q err %v", tc.specs, c.Mode(), err)
		}
		if err != nil && !errors.Is(err, ErrBadConfig) {
			t.Errorf("%v: %v is not ErrBadConfig", tc.specs, err)
		}
	}
}

// TestNewRefusesBadConfig: bad input gets a clear ErrBadConfig.
func TestNewRefusesBadConfig(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := dir + "/" + name
		if err := writeFile(p, content); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cases := []struct {
		name string
		cfg  Config
		want string
	}{
		{"no CA dir", Config{}, "CADir"},
		{"missing mock file", Config{CADir: dir, MockFile: dir + "/nope.yaml"}, "nope.yaml"},
		{"unknown field", Config{CADir: dir, MockFile: write("typo.yaml", "rutes: []\n")}, "rutes"},
		{"bad route", Config{CADir: dir, MockFile: write("bad.yaml", "routes:\n  - path: nope\n")}, "must start with /"},
		{"secret not set", Config{CADir: dir, Allow: []Rule{{Host: "a.com", Inject: map[string]Secret{"Authorization": {Env: "NETSIM_SURELY_UNSET"}}}}}, "NETSIM_SURELY_UNSET"},
		{"secret with two sources", Config{CADir: dir, Allow: []Rule{{Host: "a.com", Inject: map[string]Secret{"X": {Env: "A", File: "/b"}}}}}, "env or file"},
		{"bad rule in file", Config{CADir: dir, MockFile: write("rule.yaml", "allow:\n  - host: '*'\n")}, "allow everything"},
	}
	for _, tc := range cases {
		_, err := New(context.Background(), tc.cfg)
		if !errors.Is(err, ErrBadConfig) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v", tc.name, err)
		}
	}
}

func writeFile(p, s string) error { return os.WriteFile(p, []byte(s), 0o644) }
