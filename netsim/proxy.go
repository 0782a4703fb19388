package netsim

import (
	"bufio"
	"context"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"github.com/dryexec/dryexec/netsim/netconf"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// ServeProxy runs the network of one sandbox that reaches netsim as an HTTP
// proxy on lis (a loopback listener; HTTP_PROXY and HTTPS_PROXY name it)
// instead of through a packet link: where no TUN device or NIC can be given
// to the sandbox (macOS's Seatbelt, which can only allow or deny a
// connection). A CONNECT request opens a tunnel that netsim treats as the
// transparent path treats a connection to that host and port (TLS
// terminated with the CA, HTTP parsed, raw TCP only by an allow rule); an
// absolute-form request (GET http://host/...) is one HTTP request to host.
// Mocks, allow rules, the block response and the log are the transparent
// path's. The destination is the name the client gave: there is no DNS
// here, and a name is resolved on the host only when a rule allows it.
//
// It returns when ctx is done or a listener fails, after every handler has
// logged its event; it closes every listener (more than one: the same port
// on 127.0.0.1 and ::1, which a client naming "localhost" may try in either
// order). A Sim serves one link or set of listeners in its life.
func (s *Sim) ServeProxy(ctx context.Context, lis ...net.Listener) error {
	if len(lis) == 0 {
		return fmt.Errorf("%w: ServeProxy with no listener", ErrBadConfig)
	}
	if !s.claimServe() {
		for _, l := range lis {
			l.Close()
		}
		return ErrServed
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.http = s.startHTTP(ctx)
	px := &http.Server{
		BaseContext:       func(net.Listener) context.Context { return ctx },
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.serveProxy(ctx, w, r) }),
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
	}
	served := make(chan error, len(lis))
	for _, l := range lis {
		go func() { served <- px.Serve(l) }()
	}
	var err error
	select {
	case <-ctx.Done():
	case err = <-served:
	}
	// Order as Serve's: no new connections, close every sandbox connection
	// (tunnels close on ctx), stop the HTTP servers, then wait for the
	// handlers still writing events.
	cancel()
	px.Close()
	s.http.lis.Close()
	s.http.srv.Close()
	s.work.closeAndWait()
	s.markQuiet()
	n := len(lis)
	if err != nil {
		n--
	}
	for range n {
		<-served
	}
	s.transport.CloseIdleConnections()
	if err == nil || errors.Is(err, http.ErrServerClosed) || errors.Is(err, net.ErrClosed) {
		return nil
	}
	return fmt.Errorf("netsim: proxy listener: %w", err)
}

// serveProxy answers one request to the proxy: a CONNECT tunnel or an
// absolute-form HTTP request, each to the destination it names.
func (s *Sim) serveProxy(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	connect := r.Method == http.MethodConnect
	if !s.proxyAuthorized(r) {
		// Not the sandbox's: not in its log either.
		w.Header().Set("Proxy-Authenticate", `Basic realm="dryexec netsim"`)
		http.Error(w, "netsim proxy: authorization required", http.StatusProxyAuthRequired)
		return
	}
	var f flow
	var err error
	switch {
	case connect:
		f, err = proxyFlow(r.Host, 0)
	case r.URL.Scheme == "http" && r.URL.Host != "":
		f, err = proxyFlow(r.URL.Host, 80)
	default:
		err = errors.New("not a proxy request (neither CONNECT nor an absolute http:// URL)")
	}
	if err != nil {
		ev := eventOf("http", r.Method, "", "", 0, http.StatusBadRequest, ActionBlocked, "proxy: "+err.Error())
		if connect {
			ev.Proto, ev.Method = "tcp", ""
		}
		// Logged before the answer is written, as every refusal is: once
		// the client has it, the event is in the log (a session's exec
		// ends on it and reads its part of the log).
		s.record(Record{NetworkEvent: ev})
		http.Error(w, "netsim proxy: "+err.Error(), http.StatusBadRequest)
		return
	}
	if s.mode == "none" {
		// As the transparent path refuses the connection itself.
		s.record(Record{NetworkEvent: eventOf("tcp", "", "", f.host(), f.port, 0, ActionBlocked, "network mode none")})
		http.Error(w, "netsim: network mode none", http.StatusForbidden)
		return
	}
	if !connect {
		s.serveRequest(w, r, &sandboxConn{f: f, scheme: "http"})
		return
	}
	if !s.work.add() {
		http.Error(w, "netsim: shutting down or too many connections", http.StatusServiceUnavailable)
		return
	}
	defer s.work.done()
	hj, ok := w.(http.Hijacker)
	if !ok {
		http.Error(w, "netsim: cannot tunnel", http.StatusInternalServerError)
		return
	}
	conn, rw, err := hj.Hijack()
	if err != nil {
		return
	}
	// The tunnel is the sandbox's connection from here: it ends with the
	// sandbox's network, as the netstack's connections do.
	context.AfterFunc(ctx, func() { conn.Close() })
	if _, err := conn.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		conn.Close()
		return
	}
	reset := func() {
		if tc, ok := conn.(*net.TCPConn); ok {
			tc.SetLinger(0) // Close sends RST: a refused tunnel looks refused
		}
		conn.Close()
	}
	s.handleConn(ctx, &bufferedConn{Conn: conn, r: rw.Reader}, f, reset)
}

// proxyAuthorized reports whether r carries Config.ProxyToken (or none is
// required). The header is the proxy's: serveRequest's forward strips it.
func (s *Sim) proxyAuthorized(r *http.Request) bool {
	if s.cfg.ProxyToken == "" {
		return true
	}
	scheme, cred, ok := strings.Cut(r.Header.Get("Proxy-Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return false
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	if err != nil {
		return false
	}
	_, pass, _ := strings.Cut(string(b), ":")
	return subtle.ConstantTimeCompare([]byte(pass), []byte(s.cfg.ProxyToken)) == 1
}

// bufferedConn reads through the bytes the proxy's server already buffered
// past the CONNECT request (a client may send its first bytes at once).
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c *bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// proxyFlow is the destination a proxy request names: host[:port] (port
// defPort when it has none; a CONNECT must name one), a literal address or
// a DNS name.
func proxyFlow(authority string, defPort int) (flow, error) {
	host, portStr, err := net.SplitHostPort(authority)
	switch {
	case err != nil && defPort == 0:
		return flow{}, fmt.Errorf("CONNECT %q: want host:port", authority)
	case err != nil:
		host, portStr = authority, strconv.Itoa(defPort)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 {
		return flow{}, fmt.Errorf("%q: bad port", authority)
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return flow{}, fmt.Errorf("%q: an address with a zone", authority)
		}
		return flow{addr: a.Unmap(), port: port, proto: "tcp"}, nil
	}
	if !netconf.ValidName(host) {
		return flow{}, fmt.Errorf("%q: not a host name", authority)
	}
	return flow{name: canonical(host), port: port, proto: "tcp"}, nil
}
