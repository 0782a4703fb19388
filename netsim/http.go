package netsim

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"

	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/netsim/mock"
)

func eventOf(proto, method, url, host string, port, status int, action, reason string) dryexec.NetworkEvent {
	return dryexec.NetworkEvent{Proto: proto, Method: method, URL: url, Host: host, Port: port, Status: status, Action: action, Reason: reason}
}

// sandboxConn is one connection from the sandbox, after sniffing (and TLS
// termination): what the HTTP server reads, with where it was going.
type sandboxConn struct {
	net.Conn
	r      io.Reader
	f      flow
	scheme string
	sni    string
}

func (c *sandboxConn) Read(p []byte) (int, error) { return c.r.Read(p) }

type connKey struct{}
type dialKey struct{}

// connListener hands sniffed connections to the HTTP server.
type connListener struct {
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
	addr net.Addr
}

func newConnListener() *connListener {
	return &connListener{ch: make(chan net.Conn), done: make(chan struct{}), addr: &net.TCPAddr{}}
}

func (l *connListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *connListener) Close() error   { l.once.Do(func() { close(l.done) }); return nil }
func (l *connListener) Addr() net.Addr { return l.addr }

func (l *connListener) push(ctx context.Context, c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
	case <-ctx.Done():
	}
	return false
}

// httpServer serves every sniffed HTTP(S) connection of one Sim.
type httpServer struct {
	lis *connListener
	srv *http.Server
}

func (s *Sim) startHTTP(ctx context.Context) *httpServer {
	h := &httpServer{lis: newConnListener()}
	h.srv = &http.Server{
		// Requests derive from Serve's context: when the sandbox's network
		// ends, forwarded requests end with it.
		BaseContext:       func(net.Listener) context.Context { return ctx },
		Handler:           http.HandlerFunc(s.serveHTTP),
		ReadHeaderTimeout: 30 * time.Second,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    1 << 20,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			return context.WithValue(ctx, connKey{}, c)
		},
	}
	go h.srv.Serve(h.lis)
	return h
}

// handleConn sniffs the first bytes of a connection: TLS, HTTP, or anything
// else (raw TCP, forwarded only when a rule allows it, else reset).
func (s *Sim) handleConn(ctx context.Context, conn net.Conn, f flow, reset func()) {
	if f.port == 53 {
		s.serveDNSTCP(ctx, conn, f)
		return
	}
	rawOK := s.candidates(f, "", "")
	wait := cmp.Or(s.cfg.SniffTimeout, sniffTimeout)
	if rawOK {
		wait = rawSniffTimeout
	}
	br := bufio.NewReaderSize(conn, 4096)
	conn.SetReadDeadline(time.Now().Add(wait))
	first, err := br.Peek(1)
	conn.SetReadDeadline(time.Time{})
	var ne net.Error
	silent := errors.As(err, &ne) && ne.Timeout()
	switch {
	case err != nil && silent && rawOK:
		s.forwardRaw(ctx, conn, br, f)
		return
	case err != nil && silent:
		// Logged before the sandbox sees the reset, as onTCP does.
		s.record(Record{NetworkEvent: eventOf("tcp", "", "", f.host(), f.port, 0, ActionBlocked, "client sent nothing (not HTTP) and no rule allows tcp "+f.host())})
		reset()
		return
	case err != nil:
		conn.Close()
		s.record(Record{NetworkEvent: eventOf("tcp", "", "", f.host(), f.port, 0, ActionBlocked, "closed before sending anything")})
		return
	case first[0] == 0x16: // TLS handshake record
		tc := tls.Server(&sandboxConn{Conn: conn, r: br}, s.tlsConf)
		hctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := tc.HandshakeContext(hctx)
		cancel()
		if err != nil {
			conn.Close()
			name := tc.ConnectionState().ServerName
			if name == "" {
				name = f.host()
			}
			s.record(Record{NetworkEvent: eventOf("https", "", "", name, f.port, 0, ActionBlocked, "TLS handshake failed (does the sandbox trust the netsim CA?): "+err.Error())})
			return
		}
		if !s.http.lis.push(ctx, &sandboxConn{Conn: tc, r: tc, f: f, scheme: "https", sni: tc.ConnectionState().ServerName}) {
			tc.Close()
		}
	case looksHTTP(br):
		if !s.http.lis.push(ctx, &sandboxConn{Conn: conn, r: br, f: f, scheme: "http"}) {
			conn.Close()
		}
	case rawOK:
		s.forwardRaw(ctx, conn, br, f)
	default:
		s.record(Record{NetworkEvent: eventOf("tcp", "", "", f.host(), f.port, 0, ActionBlocked, "not HTTP, and no rule allows tcp "+f.host())})
		reset()
	}
}

var methods = []string{"GET ", "POST ", "PUT ", "DELETE ", "HEAD ", "OPTIONS ", "PATCH ", "TRACE ", "CONNECT "}

// looksHTTP checks the buffered bytes against the request-line methods.
func looksHTTP(br *bufio.Reader) bool {
	b, _ := br.Peek(min(br.Buffered(), 8))
	for _, m := range methods {
		n := min(len(b), len(m))
		if n > 0 && string(b[:n]) == m[:n] {
			return true
		}
	}
	return false
}

// forwardRaw connects a raw TCP flow to its real destination, if allowed.
func (s *Sim) forwardRaw(ctx context.Context, conn net.Conn, br *bufio.Reader, f flow) {
	defer conn.Close()
	d := s.decide(ctx, f, "", "")
	if !d.allowed {
		s.record(Record{NetworkEvent: eventOf("tcp", "", "", f.host(), f.port, 0, ActionBlocked, d.reason)})
		return
	}
	up, err := (&net.Dialer{Timeout: 15 * time.Second}).DialContext(ctx, "tcp", netip.AddrPortFrom(d.dial, uint16(f.port)).String())
	if err != nil {
		s.record(Record{NetworkEvent: eventOf("tcp", "", "", f.host(), f.port, 0, ActionAllowed, d.reason+"; connecting failed: "+err.Error())})
		return
	}
	defer up.Close()
	stop := context.AfterFunc(ctx, func() { up.Close(); conn.Close() })
	defer stop()
	var in int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		in, _ = io.Copy(conn, up)
		conn.Close()
	}()
	out, _ := io.Copy(up, br)
	if tc, ok := up.(*net.TCPConn); ok {
		tc.CloseWrite()
	}
	<-done
	ev := eventOf("tcp", "", "", f.host(), f.port, 0, ActionAllowed, d.reason)
	ev.BytesIn, ev.BytesOut = in, out
	s.record(Record{NetworkEvent: ev})
}

func (s *Sim) dialUpstream(ctx context.Context, network, addr string) (net.Conn, error) {
	ip, ok := ctx.Value(dialKey{}).(netip.Addr)
	if !ok {
		// Fail closed: only a checked decision says where to go.
		return nil, errors.New("netsim: upstream dial without a decision")
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	return (&net.Dialer{Timeout: 15 * time.Second}).DialContext(ctx, "tcp", net.JoinHostPort(ip.String(), port))
}

// headerHost is the canonical host name of a Host header.
func headerHost(h string) string {
	if name, _, err := net.SplitHostPort(h); err == nil {
		h = name
	}
	return canonical(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"))
}

func defaultPort(scheme string) int {
	if scheme == "https" {
		return 443
	}
	return 80
}

func hostPort(host string, port int, scheme string) string {
	if strings.Contains(host, ":") {
		host = "[" + host + "]"
	}
	if port == defaultPort(scheme) {
		return host
	}
	return host + ":" + strconv.Itoa(port)
}

// serveHTTP answers one request from the sandbox: mocks first, then allow
// rules, else the block response.
func (s *Sim) serveHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.work.add() {
		http.Error(w, "netsim: shutting down", http.StatusServiceUnavailable)
		return
	}
	defer s.work.done()
	sc, ok := r.Context().Value(connKey{}).(*sandboxConn)
	if !ok {
		http.Error(w, "netsim: no connection", http.StatusInternalServerError)
		return
	}
	s.serveRequest(w, r, sc)
}

// serveRequest answers one request that was going to sc's destination:
// the transparent path's (one connection, one flow) and the proxy's (one
// request, one flow) alike.
func (s *Sim) serveRequest(w http.ResponseWriter, r *http.Request, sc *sandboxConn) {
	f := sc.f
	// The name mocks and the log use: the DNS name the sandbox resolved,
	// else (a literal address) the TLS SNI or the Host header. Allow rules
	// always use the real destination (f).
	host := f.name
	if host == "" {
		host = sc.sni
	}
	if host == "" {
		host = headerHost(r.Host)
	}
	if host == "" {
		host = f.addr.String()
	}
	host = canonical(host)
	url := sc.scheme + "://" + hostPort(host, f.port, sc.scheme) + r.URL.RequestURI()
	rec := Record{NetworkEvent: eventOf(sc.scheme, r.Method, url, host, f.port, 0, "", ""), RequestHeader: r.Header}

	body, err := io.ReadAll(io.LimitReader(r.Body, maxRequestBody+1))
	if err != nil {
		return
	}
	rec.RequestBody, rec.BytesOut = body, int64(len(body))
	if len(body) > maxRequestBody {
		s.block(w, &rec, http.StatusRequestEntityTooLarge, fmt.Sprintf("request body larger than %d bytes", maxRequestBody), nil)
		return
	}

	res := s.mocks.Match(r.Context(), &mock.Request{
		Host: host, Port: f.port, Method: r.Method, Path: r.URL.Path,
		RawQuery: r.URL.RawQuery, Header: r.Header, Body: body,
	})
	if res.Matched {
		s.answerMock(w, r, &rec, res)
		return
	}
	d := s.decide(r.Context(), f, r.Method, r.URL.Path)
	switch {
	case !d.allowed:
	case r.Method == http.MethodConnect:
		// A tunnel would carry traffic no rule has seen.
		d = decision{reason: "CONNECT tunnels are not forwarded"}
	case f.name != "" && headerHost(r.Host) != f.name:
		// The server would route by the Host header (domain fronting on a
		// CDN): the request must name the host the rule allowed.
		d = decision{reason: fmt.Sprintf("Host header %q does not name %s, the host connected to", r.Host, f.name)}
	default:
		s.forward(w, r, &rec, sc, d, body)
		return
	}
	reason := d.reason
	if s.mode == "none" {
		reason = "network mode none"
	}
	if res.SchemaBreach {
		rec.SchemaBreach = true
		reason = res.Reason + "; " + reason
	}
	s.block(w, &rec, 0, reason, s.mocks.Block())
}

func (s *Sim) answerMock(w http.ResponseWriter, r *http.Request, rec *Record, res mock.Result) {
	resp := res.Response
	if resp.Delay > 0 {
		t := time.NewTimer(resp.Delay)
		select {
		case <-t.C:
		case <-r.Context().Done():
			t.Stop()
		}
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(resp.Body)))
	w.WriteHeader(resp.Status)
	if r.Method != http.MethodHead {
		w.Write(resp.Body)
	}
	rec.Status, rec.Action, rec.Reason, rec.SchemaBreach = resp.Status, ActionMocked, "mock: "+res.Reason, res.SchemaBreach
	rec.ResponseHeader, rec.ResponseBody, rec.BytesIn = resp.Header, resp.Body, int64(len(resp.Body))
	s.record(*rec)
}

// block answers with the configured block response (default: 403 and a JSON
// body naming the reason) and logs the request as blocked.
func (s *Sim) block(w http.ResponseWriter, rec *Record, status int, reason string, custom *mock.Response) {
	var resp mock.Response
	if custom != nil {
		resp = *custom
	} else {
		b, _ := json.Marshal(map[string]string{"error": "blocked by dryexec netsim", "reason": reason})
		resp = mock.Response{Status: http.StatusForbidden, Header: http.Header{"Content-Type": {"application/json"}}, Body: append(b, '\n')}
	}
	if status != 0 {
		resp.Status = status
	}
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.Header().Set("X-Dryexec-Netsim", "blocked")
	w.Header().Set("Content-Length", strconv.Itoa(len(resp.Body)))
	w.WriteHeader(resp.Status)
	w.Write(resp.Body)
	rec.Status, rec.Action, rec.Reason = resp.Status, ActionBlocked, reason
	rec.ResponseHeader, rec.ResponseBody, rec.BytesIn = w.Header().Clone(), resp.Body, int64(len(resp.Body))
	s.record(*rec)
}

// hopHeaders are connection-scoped and never forwarded (RFC 9110 §7.6.1).
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func stripHop(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, k := range strings.Split(f, ",") {
			h.Del(strings.TrimSpace(k))
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
}

// forward sends an allowed request to its real destination: the address
// decide checked, never re-resolved, with the rule's injected headers.
func (s *Sim) forward(w http.ResponseWriter, r *http.Request, rec *Record, sc *sandboxConn, d decision, body []byte) {
	target := sc.scheme + "://" + hostPort(sc.f.host(), sc.f.port, sc.scheme) + r.URL.RequestURI()
	ctx := context.WithValue(r.Context(), dialKey{}, d.dial)
	out, err := http.NewRequestWithContext(ctx, r.Method, target, bytes.NewReader(body))
	if err != nil {
		s.block(w, rec, http.StatusBadGateway, "building upstream request: "+err.Error(), nil)
		return
	}
	out.Header = r.Header.Clone()
	stripHop(out.Header)
	out.Host = r.Host
	out.ContentLength = int64(len(body))
	for k, v := range s.ruleHdrs[d.rule] {
		out.Header[k] = v
	}
	resp, err := s.transport.RoundTrip(out)
	if err != nil {
		msg := []byte("netsim: upstream failed: " + err.Error() + "\n")
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(http.StatusBadGateway)
		w.Write(msg)
		rec.Status, rec.Action, rec.Reason = http.StatusBadGateway, ActionAllowed, d.reason+"; upstream failed: "+err.Error()
		rec.BytesIn = int64(len(msg))
		s.record(*rec)
		return
	}
	defer resp.Body.Close()
	stripHop(resp.Header)
	for k, v := range resp.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(resp.StatusCode)
	cb := &capBuffer{max: s.maxBody}
	io.Copy(io.MultiWriter(w, cb), resp.Body)
	rec.Status, rec.Action, rec.Reason = resp.StatusCode, ActionAllowed, d.reason
	rec.ResponseHeader, rec.ResponseBody, rec.ResponseTruncated, rec.BytesIn = resp.Header, cb.buf.Bytes(), cb.truncated(), cb.n
	s.record(*rec)
}
