package apiclient

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// This file is the client's HTTP/1.1: exactly what the daemon's API needs (a
// request with a JSON body, an answer framed by Content-Length or chunked,
// one kept connection), written over net.Conn rather than with net/http.
// Why: the front (cmd/dryexec-front) exists to start fast, and net/http
// brings crypto/tls, x509, HTTP/2 and their package initialisation, plus a
// reader and a writer goroutine per connection whose wake-ups start OS
// threads; measured with perf on the 2-CPU VM, the front spent about half
// of its CPU in the runtime's start-up, package init and thread creation,
// the rest mostly in net/http and JSON. The daemon's side stays net/http.

// errConnClosed: the kept connection was closed by the daemon before it read
// the request (it closes idle ones only when it stops).
var errConnClosed = errors.New("the daemon closed the connection")

// wire is one HTTP/1.1 connection to the daemon, dialled on first use and
// kept between requests while the daemon keeps it. Not safe for concurrent
// use: a Conn makes one request at a time.
type wire struct {
	network, addr string // "unix" and a socket path, or "tcp" and HOST:PORT
	host          string // the Host header
	// headWait, when not zero, bounds the wait for an answer's status and
	// header (not its body): a daemon that does not answer in that time is
	// not one to wait for.
	headWait time.Duration
	c        net.Conn
	br       *bufio.Reader
}

// response is an answer whose body is being read from the connection.
type response struct {
	status int
	// header holds the header fields by lower-case name (the last of a
	// repeated one).
	header map[string]string
	body   io.Reader
	w      *wire
	// reusable: the body is framed and the daemon did not say it closes.
	reusable bool
}

// close ends the response: a body read to its end leaves the connection for
// the next request, anything else closes it.
func (r *response) close() {
	if r.reusable {
		var one [1]byte
		if n, err := r.body.Read(one[:]); n == 0 && errors.Is(err, io.EOF) {
			return
		}
	}
	r.w.drop()
}

func (w *wire) drop() {
	if w.c != nil {
		w.c.Close()
		w.c, w.br = nil, nil
	}
}

// do sends one request and reads the answer's status and header. Ending ctx
// closes the connection (the daemon then kills a trial it runs for it);
// ctx's deadline bounds every read and write.
func (w *wire) do(ctx context.Context, method, path string, hdr [][2]string, body []byte) (*response, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	var req bytes.Buffer
	fmt.Fprintf(&req, "%s %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: dryexec\r\n", method, path, w.host)
	for _, h := range hdr {
		fmt.Fprintf(&req, "%s: %s\r\n", h[0], h[1])
	}
	if body != nil || method == "POST" {
		fmt.Fprintf(&req, "Content-Length: %d\r\n", len(body))
	}
	req.WriteString("\r\n")
	req.Write(body)
	for attempt := 0; ; attempt++ {
		kept := w.c != nil
		resp, err := w.try(ctx, req.Bytes())
		if err == nil {
			return resp, nil
		}
		w.drop()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		// A kept connection the daemon closed meanwhile fails before the
		// daemon read anything: the request is sent once more on a new one.
		if !kept || attempt > 0 || !errors.Is(err, errConnClosed) {
			return nil, err
		}
	}
}

func (w *wire) try(ctx context.Context, req []byte) (*response, error) {
	if w.c == nil {
		var d net.Dialer
		c, err := d.DialContext(ctx, w.network, w.addr)
		if err != nil {
			return nil, err
		}
		w.c, w.br = c, bufio.NewReaderSize(c, 16<<10)
	}
	c := w.c
	if dl, ok := ctx.Deadline(); ok {
		c.SetDeadline(dl)
	} else {
		c.SetDeadline(time.Time{})
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	if _, err := c.Write(req); err != nil {
		stop()
		return nil, closedOr(err)
	}
	if w.headWait > 0 {
		if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > w.headWait {
			c.SetReadDeadline(time.Now().Add(w.headWait))
		}
	}
	resp, err := w.readHead()
	if err != nil {
		stop()
		return nil, err
	}
	if w.headWait > 0 {
		dl, _ := ctx.Deadline()
		c.SetReadDeadline(dl)
	}
	// The body is read under the same watch: stop runs once it is done.
	resp.body = &watched{r: resp.body, stop: stop, c: c}
	return resp, nil
}

// watched ends the context watch of a request once its body is read (or on
// close, through response.close). A body that fails (a deadline, a
// connection cut) closes the connection: the daemon then knows its client
// is gone (a trial it runs for it is killed), whichever of the deadline and
// the context's end came first.
type watched struct {
	r    io.Reader
	stop func() bool
	c    net.Conn
}

func (w *watched) Read(p []byte) (int, error) {
	n, err := w.r.Read(p)
	if err != nil {
		w.stop()
		if !errors.Is(err, io.EOF) {
			w.c.Close()
		}
	}
	return n, err
}

// closedOr maps the errors of a connection the daemon closed to
// errConnClosed.
func closedOr(err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed) ||
		strings.Contains(err.Error(), "broken pipe") || strings.Contains(err.Error(), "connection reset") {
		return fmt.Errorf("%w: %v", errConnClosed, err)
	}
	return err
}

// readHead reads the status line and header fields of an answer.
func (w *wire) readHead() (*response, error) {
	line, err := w.line()
	if err != nil {
		return nil, closedOr(err)
	}
	proto, rest, _ := strings.Cut(line, " ")
	code, _, _ := strings.Cut(rest, " ")
	status, err := strconv.Atoi(code)
	if !strings.HasPrefix(proto, "HTTP/1.") || err != nil || status < 100 || status > 999 {
		return nil, fmt.Errorf("not an HTTP/1.x answer: %q", line)
	}
	r := &response{status: status, header: map[string]string{}, w: w}
	for {
		line, err := w.line()
		if err != nil {
			return nil, closedOr(err)
		}
		if line == "" {
			break
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("bad header line in the answer: %q", line)
		}
		r.header[strings.ToLower(strings.TrimSpace(k))] = strings.TrimSpace(v)
	}
	if status >= 100 && status < 200 {
		return w.readHead() // 100 Continue and the like: the answer follows
	}
	r.reusable = proto == "HTTP/1.1" && !strings.EqualFold(r.header["connection"], "close")
	switch {
	case strings.EqualFold(r.header["transfer-encoding"], "chunked"):
		r.body = &chunked{br: w.br}
	case r.header["content-length"] != "":
		n, err := strconv.ParseInt(r.header["content-length"], 10, 64)
		if err != nil || n < 0 {
			return nil, fmt.Errorf("bad Content-Length in the answer: %q", r.header["content-length"])
		}
		r.body = &exact{r: io.LimitReader(w.br, n), left: n}
	case status == 204 || status == 304:
		r.body = eof{}
	default:
		// Framed by the end of the connection.
		r.body, r.reusable = w.br, false
	}
	return r, nil
}

// line reads one CRLF-terminated line (at most 64 KiB) without its end.
func (w *wire) line() (string, error) {
	var b []byte
	for {
		frag, err := w.br.ReadSlice('\n')
		b = append(b, frag...)
		if err == nil {
			break
		}
		if !errors.Is(err, bufio.ErrBufferFull) {
			return "", err
		}
		if len(b) > 64<<10 {
			return "", errors.New("a line of the answer is over 64 KiB")
		}
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

// exact reads a body of a known length; one that ends early is an error.
type exact struct {
	r    io.Reader
	left int64
}

func (e *exact) Read(p []byte) (int, error) {
	if e.left == 0 {
		return 0, io.EOF
	}
	n, err := e.r.Read(p)
	e.left -= int64(n)
	if errors.Is(err, io.EOF) && e.left > 0 {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

type eof struct{}

func (eof) Read([]byte) (int, error) { return 0, io.EOF }

// chunked reads a chunked body (RFC 9112, 7.1), trailers dropped.
type chunked struct {
	br   *bufio.Reader
	left int64 // bytes left in the current chunk
	done bool
	err  error
}

func (c *chunked) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	if c.done {
		return 0, io.EOF
	}
	if c.left == 0 {
		line, err := readLine(c.br)
		if err != nil {
			c.err = unexpected(err)
			return 0, c.err
		}
		size, _, _ := strings.Cut(line, ";")
		n, err := strconv.ParseInt(strings.TrimSpace(size), 16, 64)
		if err != nil || n < 0 {
			c.err = fmt.Errorf("bad chunk size in the answer: %q", line)
			return 0, c.err
		}
		if n == 0 {
			for { // trailers, up to the empty line
				line, err := readLine(c.br)
				if err != nil {
					c.err = unexpected(err)
					return 0, c.err
				}
				if line == "" {
					break
				}
			}
			c.done = true
			return 0, io.EOF
		}
		c.left = n
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.br.Read(p)
	c.left -= int64(n)
	if err != nil {
		c.err = unexpected(err)
		return n, c.err
	}
	if c.left == 0 {
		if line, err := readLine(c.br); err != nil || line != "" {
			c.err = errors.New("a chunk of the answer does not end with CRLF")
			return n, c.err
		}
	}
	return n, nil
}

func readLine(br *bufio.Reader) (string, error) {
	b, err := br.ReadSlice('\n')
	if err != nil {
		return "", err
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

func unexpected(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}
