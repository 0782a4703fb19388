package netconf

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/netsim/ca"
	"github.com/dryexec/dryexec/netsim/mock"
)

// Record is one logged exchange: the event and its bounded, redacted
// bodies (what the role process streams to its parent).
type Record = dryexec.Exchange

// SeedOf is Config.Seed for a trial or session id: mocks repeatable per
// trial, the same id giving the same bytes.
func SeedOf(id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	return h.Sum64()
}

// ErrBadConfig is wrapped by every error about a netsim configuration: a
// malformed --net value, rule or mock file.
var ErrBadConfig = errors.New("bad network config")

// Config says what a sandbox's network may do. The zero Config (no mocks, no
// rules) is mode "none": every attempt is refused and logged as blocked.
// Mocks answer first, then allow rules forward for real, else the request is
// blocked.
type Config struct {
	// MockFile is a YAML or JSON file with mocks (routes, OpenAPI documents,
	// the block response) and optionally allow rules; see docs/network.md.
	MockFile string
	// Allow rules, added to those of MockFile.
	Allow []Rule
	// CADir holds the per-install CA (created on first use, 0600). Required
	// unless CA is given.
	CADir string
	// CA, when set, is the CA itself and CADir is not read: the confined
	// role process (package netsim/netproc) receives the CA over a pipe
	// rather than reading the CA's directory.
	CA *ca.CA
	// Seed makes generated mock responses repeatable: the same seed and
	// request give the same bytes.
	Seed uint64

	// LookupHost resolves names for allowed traffic on the host side; nil
	// means the host's resolver. Tests set it so they never touch the
	// machine's resolver.
	LookupHost func(ctx context.Context, host string) ([]netip.Addr, error)
	// UpstreamRoots verifies the real servers allowed HTTPS goes to; nil
	// means the host's system roots.
	UpstreamRoots *x509.CertPool
	// LookupEnv reads the host-side values credential injection refers to;
	// nil means os.LookupEnv. Values are read once, by New.
	LookupEnv func(string) (string, bool)
	// ReadSecretFile reads the files credential injection refers to; nil
	// means os.ReadFile. The role process is handed the contents instead of
	// access to the files.
	ReadSecretFile func(string) ([]byte, error)
	// OnRecord, when set, sees every event as it is logged (kept says
	// whether the log held it or counted it in Dropped), in log order: the
	// role process streams the log to its parent with it. It runs with the
	// log locked: it must not block or call back into the Sim.
	OnRecord func(r Record, kept bool)
	// OpenAPI loads the OpenAPI documents MockFile names (package
	// netsim/mock/openapi's Load); nil refuses a mock file naming any, with
	// ErrBadConfig and mock.ErrNoOpenAPI. A parameter, not an import, so that
	// only the programs serving OpenAPI mocks link kin-openapi and pay for
	// its initialisation (docs/architecture.md, "The front and the engine").
	OpenAPI mock.LoadAPI
	// Logger gets netsim's internal diagnostics; nil discards them. The
	// network log proper is Sim.Log.
	Logger *slog.Logger

	// MaxBodyBytes bounds each request and response body kept in a Record
	// (default 64 KiB); the traffic itself is not cut.
	MaxBodyBytes int
	// SniffTimeout is how long a new TCP connection may stay silent before
	// netsim takes it for a server-speaks-first protocol (and, with no rule
	// allowing raw TCP, resets it); 0: 2s. A VM under TCG needs longer: its
	// curl sent its TLS ClientHello more than 2 s after connecting on a
	// loaded host (it loads the CA bundle in between).
	SniffTimeout time.Duration
	// MaxEvents bounds the log (default 10000); later events are counted in
	// Sim.Dropped only.
	MaxEvents int
	// ProxyToken, when set, is the password ServeProxy requires of every
	// request (Proxy-Authorization: Basic, any user name): its port is on
	// the host's loopback, where any local program could otherwise send
	// requests through it, with the credentials allow rules inject.
	ProxyToken string

	// none records that AddSpec saw "none", so that a mock or rule added
	// after it is refused as well as one added before it.
	none bool
}

// Rule allows real traffic. Every field given must match.
type Rule struct {
	// Host is an exact name, "*.example.com" (names below it), or an IP
	// address. A name that resolves to a loopback, private, link-local or
	// metadata address is refused unless a rule names that address.
	Host string `yaml:"host" json:"host"`
	// Port: 0 means any.
	Port int `yaml:"port" json:"port"`
	// Methods limits HTTP methods (empty: any). A rule with Methods or
	// PathPrefix only allows HTTP(S); a rule without them allows any TCP.
	Methods []string `yaml:"methods" json:"methods"`
	// PathPrefix limits HTTP paths.
	PathPrefix string `yaml:"path_prefix" json:"path_prefix"`
	// Inject adds headers to allowed HTTP(S) requests, values read on the
	// host (env or file), never visible to the sandbox, redacted in the log.
	Inject map[string]Secret `yaml:"inject" json:"inject"`
	// UDP allows UDP datagrams to Host:Port too (DNS excepted: netsim
	// always answers DNS itself).
	UDP bool `yaml:"udp" json:"udp"`
}

// Secret is where an injected header's value comes from on the host.
type Secret struct {
	Env    string `yaml:"env" json:"env"`
	File   string `yaml:"file" json:"file"`
	Prefix string `yaml:"prefix" json:"prefix"` // e.g. "Bearer "
}

// Mode names the configuration: "none", "mock", "allow" or "mock+allow".
func (c *Config) Mode() string {
	switch {
	case c.MockFile != "" && len(c.Allow) > 0:
		return "mock+allow"
	case c.MockFile != "":
		return "mock"
	case len(c.Allow) > 0:
		return "allow"
	}
	return "none"
}

// AddSpec applies one --net value: "none", "mock:FILE" or
// "allow:RULE[,RULE…]". Repeat it to combine (mock first, then allow).
// "none" with anything else is an error in either order: it contradicts them.
// An allow rule for the sandbox's loopback is refused (see loopbackRule).
func (c *Config) AddSpec(spec string) error {
	switch {
	case spec == "none":
		if c.MockFile != "" || len(c.Allow) > 0 {
			return fmt.Errorf("%w: --net none contradicts the mocks or allow rules given before it: drop none, or drop them", ErrBadConfig)
		}
		c.none = true
		return nil
	case strings.HasPrefix(spec, "mock:"):
		if c.none {
			return fmt.Errorf("%w: --net %s contradicts --net none given before it: drop none, or drop the mock", ErrBadConfig, spec)
		}
		f := strings.TrimPrefix(spec, "mock:")
		if f == "" {
			return fmt.Errorf("%w: mock: needs a file", ErrBadConfig)
		}
		if c.MockFile != "" {
			return fmt.Errorf("%w: only one mock file (have %s)", ErrBadConfig, c.MockFile)
		}
		c.MockFile = f
		return nil
	case strings.HasPrefix(spec, "allow:"):
		if c.none {
			return fmt.Errorf("%w: --net %s contradicts --net none given before it: drop none, or drop the rule", ErrBadConfig, spec)
		}
		rules, err := ParseRules(strings.TrimPrefix(spec, "allow:"))
		if err != nil {
			return err
		}
		for _, r := range rules {
			if err := loopbackRule(r); err != nil {
				return err
			}
		}
		c.Allow = append(c.Allow, rules...)
		return nil
	}
	return fmt.Errorf("%w: --net %q: want none, mock:FILE or allow:HOST[:PORT][/PATH],…", ErrBadConfig, spec)
}

// loopbackRule refuses an allow rule for a loopback address or name. Inside
// a trial, 127.0.0.1, ::1 and localhost are the sandbox's own loopback: a
// connection to them stays in the sandbox's network namespace and never
// reaches netsim, so such a rule could never apply, and a program that
// meant the host's service would fail with nothing in the log saying why.
// dryexec does not forward the host's loopback into a trial: the host's
// loopback is where its own API (and often unauthenticated development
// services) listen.
func loopbackRule(r Rule) error {
	h := strings.ToLower(strings.TrimSuffix(r.Host, "."))
	a, err := netip.ParseAddr(h)
	if (err == nil && (a.Unmap().IsLoopback() || a.IsUnspecified())) || h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return fmt.Errorf("%w: allow rule %q: inside a trial %s is the sandbox's own loopback, which never reaches netsim, so this rule could never apply; "+
			"dryexec does not forward the host's loopback into a trial: start the service inside the command, answer it with --net mock:FILE, "+
			"or have it listen on another address of the host's and allow that address", ErrBadConfig, RuleString(&r), r.Host)
	}
	return nil
}

// ParseRules parses comma-separated HOST[:PORT][/PATH-PREFIX] rules, as given
// to --net allow:. HOST may be a name, *.domain, an IPv4 address or an IPv6
// address in brackets.
func ParseRules(s string) ([]Rule, error) {
	var out []Rule
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		r, err := parseRule(part)
		if err != nil {
			return nil, fmt.Errorf("%w: allow rule %q: %v", ErrBadConfig, part, err)
		}
		out = append(out, r)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: allow: needs at least one HOST[:PORT]", ErrBadConfig)
	}
	return out, nil
}

func parseRule(s string) (Rule, error) {
	var r Rule
	if i := strings.IndexByte(s, '/'); i >= 0 {
		r.PathPrefix = s[i:]
		s = s[:i]
	}
	host, port := s, ""
	if strings.HasPrefix(s, "[") {
		end := strings.IndexByte(s, ']')
		if end < 0 {
			return r, errors.New("unclosed [")
		}
		host, port = s[1:end], strings.TrimPrefix(s[end+1:], ":")
		if _, err := netip.ParseAddr(host); err != nil {
			return r, fmt.Errorf("%q is not an IPv6 address", host)
		}
	} else if i := strings.LastIndexByte(s, ':'); i >= 0 {
		host, port = s[:i], s[i+1:]
	}
	if port != "" {
		p, err := strconv.Atoi(port)
		if err != nil || p < 1 || p > 65535 {
			return r, fmt.Errorf("port %q: want 1-65535", port)
		}
		r.Port = p
	}
	r.Host = host
	return r, CheckRule(r)
}

// CheckRule checks one allow rule as ParseRules does (a rule read from a
// mock file is checked by it too); the error says what is wrong, without
// ErrBadConfig.
func CheckRule(r Rule) error {
	h := r.Host
	switch {
	case h == "":
		return errors.New("empty host")
	case h == "*":
		return errors.New(`"*" would allow everything; name the hosts`)
	case strings.HasPrefix(h, "*."):
		h = h[2:]
	}
	if _, err := netip.ParseAddr(h); err == nil {
		if strings.HasPrefix(r.Host, "*.") {
			return errors.New("a wildcard cannot hold an address")
		}
	} else if !ValidName(h) {
		return fmt.Errorf("%q is not a host name", r.Host)
	}
	if r.Port < 0 || r.Port > 65535 {
		return fmt.Errorf("port %d out of range", r.Port)
	}
	if r.PathPrefix != "" && !strings.HasPrefix(r.PathPrefix, "/") {
		return fmt.Errorf("path prefix %q must start with /", r.PathPrefix)
	}
	for k, v := range r.Inject {
		if k == "" || strings.ContainsAny(k, " :\r\n") {
			return fmt.Errorf("inject: bad header name %q", k)
		}
		if (v.Env == "") == (v.File == "") {
			return fmt.Errorf("inject %s: give env or file", k)
		}
	}
	return nil
}

// ValidName reports whether h is a DNS name netsim takes: labels of
// letters, digits, '-' and '_', each at most 63 bytes, 253 in all.
func ValidName(h string) bool {
	h = strings.TrimSuffix(h, ".")
	if h == "" || len(h) > 253 {
		return false
	}
	for _, label := range strings.Split(h, ".") {
		if label == "" || len(label) > 63 {
			return false
		}
		for _, c := range label {
			if !(c == '-' || c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
				return false
			}
		}
	}
	return true
}

// RuleString is how a rule is named in the log and in errors: METHODS
// HOST:PORT/PATH, "(udp)" when it allows UDP.
func RuleString(r *Rule) string {
	var b strings.Builder
	if len(r.Methods) > 0 {
		b.WriteString(strings.Join(r.Methods, "|") + " ")
	}
	if strings.Contains(r.Host, ":") {
		b.WriteString("[" + r.Host + "]")
	} else {
		b.WriteString(r.Host)
	}
	if r.Port != 0 {
		fmt.Fprintf(&b, ":%d", r.Port)
	}
	b.WriteString(r.PathPrefix)
	if r.UDP {
		b.WriteString(" (udp)")
	}
	return b.String()
}
