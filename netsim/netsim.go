package netsim

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/dryexec/dryexec/netsim/ca"
	"github.com/dryexec/dryexec/netsim/mock"
	"github.com/dryexec/dryexec/netsim/mockfile"
	"github.com/dryexec/dryexec/netsim/netconf"
)

// Defaults of the bounds in Config.
const (
	defaultMaxBody   = 64 << 10
	defaultMaxEvents = 10000
	// maxRequestBody bounds a request body netsim reads into memory (mocks
	// validate whole bodies; forwarded ones are buffered too, so the log can
	// keep them). A larger request gets 413 and is logged as blocked.
	maxRequestBody = 32 << 20
	// sniffTimeout is how long netsim waits for a client to speak first
	// before it treats a connection as a server-speaks-first protocol.
	sniffTimeout = 2 * time.Second
	// rawSniffTimeout is the same wait when a rule allows the connection as
	// raw TCP: short, because the real server may be the one to speak.
	rawSniffTimeout = 300 * time.Millisecond
	// maxWork bounds the connections, DNS sockets and UDP flows handled at
	// once: a sandbox opening more gets resets, not host memory.
	maxWork = 4096
	// idleTimeout closes connections nobody uses.
	idleTimeout = 2 * time.Minute
)

// File is a netsim file: mocks plus allow rules (YAML or JSON).
type File = mockfile.File

// Sim is one sandbox's network: a userspace TCP/IP stack that terminates
// every connection, datagram and DNS query, and the log of what happened.
// Create it with New, serve one link with Serve (or ServeTUN), then read Log.
type Sim struct {
	cfg       Config
	mode      string
	ca        *ca.CA
	mocks     *mock.Set
	rules     []Rule
	names     *names
	log       *slog.Logger
	maxBody   int
	maxEvents int
	// injected are the canonical header names rules inject; secrets their
	// values. Both read once by New; never shown in the log.
	injected map[string]struct{}
	secrets  []string
	ruleHdrs map[*Rule]http.Header

	transport *http.Transport
	tlsConf   *tls.Config
	// http serves sniffed HTTP(S) connections; set by Serve before the
	// stack accepts anything.
	http *httpServer

	// logMu guards records, dropped and bodyBytes.
	logMu     sync.Mutex
	records   []Record
	dropped   int
	bodyBytes int

	// serveMu guards served.
	serveMu sync.Mutex
	served  bool
	// quiet is closed once Serve takes no more packets and every event is
	// logged (Quiet); quietOnce closes it.
	quiet     chan struct{}
	quietOnce sync.Once
	// work counts the goroutines that will still record events, so Serve
	// returns only once the log is complete.
	work tracker
	// syns are the connection attempts (TCP SYNs) the stack has taken but
	// no handler has yet: see noteSYN.
	syns synSet
}

// Quiet is closed once Serve has stopped taking packets (its context is
// done or its link ended) and everything it will log is in Log. Serve itself
// returns later, once the stack and its goroutines are gone: a caller that
// only needs the log waits for Quiet and leaves the teardown (≈ 0.2 ms on
// this project's VMs) off its path.
func (s *Sim) Quiet() <-chan struct{} { return s.quiet }

func (s *Sim) markQuiet() { s.quietOnce.Do(func() { close(s.quiet) }) }

// tracker is a WaitGroup that refuses new work once closed (a WaitGroup must
// not be Added to while Wait runs).
type tracker struct {
	mu     sync.Mutex
	n      int
	closed bool
	zero   chan struct{}
}

func (t *tracker) add() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || t.n >= maxWork {
		return false
	}
	t.n++
	return true
}

func (t *tracker) done() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.n--
	if t.n == 0 && t.zero != nil {
		close(t.zero)
		t.zero = nil
	}
}

// closeAndWait refuses new work and waits for the running work.
func (t *tracker) closeAndWait() {
	t.mu.Lock()
	t.closed = true
	if t.n == 0 {
		t.mu.Unlock()
		return
	}
	z := make(chan struct{})
	t.zero = z
	t.mu.Unlock()
	<-z
}

// New checks cfg, loads the mock file and the CA (creating the CA on first
// use) and reads the injected credentials.
func New(ctx context.Context, cfg Config) (*Sim, error) {
	if cfg.CADir == "" && cfg.CA == nil {
		return nil, fmt.Errorf("%w: CADir is required", ErrBadConfig)
	}
	s := &Sim{
		quiet:     make(chan struct{}),
		cfg:       cfg,
		names:     newNames(),
		log:       cfg.Logger,
		maxBody:   cfg.MaxBodyBytes,
		maxEvents: cfg.MaxEvents,
		injected:  map[string]struct{}{},
		ruleHdrs:  map[*Rule]http.Header{},
	}
	if s.log == nil {
		s.log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if s.maxBody <= 0 {
		s.maxBody = defaultMaxBody
	}
	if s.maxEvents <= 0 {
		s.maxEvents = defaultMaxEvents
	}
	s.rules = append(s.rules, cfg.Allow...)
	if cfg.MockFile != "" {
		f, err := mockfile.Load(cfg.MockFile)
		if err != nil {
			return nil, err
		}
		s.mocks, err = mock.Compile(ctx, f.Spec, filepath.Dir(cfg.MockFile), cfg.Seed, cfg.OpenAPI)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrBadConfig, cfg.MockFile, err)
		}
		s.rules = append(s.rules, f.Allow...)
	}
	s.mode = "none"
	switch {
	case s.mocks != nil && len(s.rules) > 0:
		s.mode = "mock+allow"
	case s.mocks != nil:
		s.mode = "mock"
	case len(s.rules) > 0:
		s.mode = "allow"
	}
	lookupEnv := cfg.LookupEnv
	if lookupEnv == nil {
		lookupEnv = os.LookupEnv
	}
	for i := range s.rules {
		r := &s.rules[i]
		if err := netconf.CheckRule(*r); err != nil {
			return nil, fmt.Errorf("%w: allow rule %q: %v", ErrBadConfig, r.Host, err)
		}
		if len(r.Inject) == 0 {
			continue
		}
		h := http.Header{}
		for name, sec := range r.Inject {
			v, err := readSecret(sec, lookupEnv, cfg.ReadSecretFile)
			if err != nil {
				return nil, fmt.Errorf("%w: allow rule %q: inject %s: %v", ErrBadConfig, r.Host, name, err)
			}
			h.Set(name, sec.Prefix+v)
			s.injected[http.CanonicalHeaderKey(name)] = struct{}{}
			s.secrets = append(s.secrets, v)
		}
		s.ruleHdrs[r] = h
	}
	s.ca = cfg.CA
	if s.ca == nil {
		c, err := ca.LoadOrCreate(cfg.CADir)
		if err != nil {
			return nil, err
		}
		s.ca = c
	}
	s.tlsConf = &tls.Config{
		// HTTP/1.1 only: one code path for mocks, forwarding and the log.
		NextProtos:     []string{"http/1.1"},
		GetCertificate: s.certificate,
		MinVersion:     tls.VersionTLS12,
	}
	s.transport = &http.Transport{
		DialContext:           s.dialUpstream,
		TLSClientConfig:       &tls.Config{RootCAs: cfg.UpstreamRoots, MinVersion: tls.VersionTLS12},
		ForceAttemptHTTP2:     false,
		MaxIdleConnsPerHost:   8,
		IdleConnTimeout:       30 * time.Second,
		TLSHandshakeTimeout:   15 * time.Second,
		ResponseHeaderTimeout: 2 * time.Minute,
		// Never a host-side proxy: allowed traffic goes where it was checked.
		Proxy: nil,
	}
	return s, nil
}

func readSecret(sec Secret, lookupEnv func(string) (string, bool), readFile func(string) ([]byte, error)) (string, error) {
	if sec.Env != "" {
		v, ok := lookupEnv(sec.Env)
		if !ok || v == "" {
			return "", fmt.Errorf("environment variable %s is not set on the host", sec.Env)
		}
		return v, nil
	}
	if readFile == nil {
		readFile = os.ReadFile
	}
	b, err := readFile(sec.File)
	if err != nil {
		return "", err
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("%s is empty", sec.File)
	}
	return v, nil
}

// Mode is "none", "mock", "allow" or "mock+allow".
func (s *Sim) Mode() string { return s.mode }

func (s *Sim) certificate(hello *tls.ClientHelloInfo) (*tls.Certificate, error) {
	name := hello.ServerName
	if name == "" {
		// No SNI (a literal address): sign for the address connected to.
		if a, ok := hello.Conn.LocalAddr().(*net.TCPAddr); ok {
			if n := s.names.nameOf(a.AddrPort().Addr()); n != "" {
				name = n
			} else {
				name = a.AddrPort().Addr().Unmap().String()
			}
		}
	}
	return s.ca.Leaf(name)
}

// Trust returns the CA and the trust setup for the sandbox.
func (s *Sim) Trust() Trust { return TrustOf(s.ca) }
