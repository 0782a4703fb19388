package firecracker

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dryexec/dryexec/rung/vm/firecracker/fctest"
)

// echoGuest is a guest's end of one stream: it names its port at once
// (right behind Firecracker's OK, so a host that reads past the OK line
// would eat it), reads to end-of-file, says how many bytes it got, closes.
func echoGuest(c net.Conn, port uint32) {
	defer c.Close()
	fmt.Fprintf(c, "port %d\n", port)
	n, _ := io.Copy(io.Discard, c)
	fmt.Fprintf(c, "got %d bytes\n", n)
}

// startedVM is a fake with a vsock device, started, at dir.
func startedVM(t *testing.T, dir string, opt fctest.Options) (*fctest.Server, string) {
	t.Helper()
	files(t, dir, "vmlinux")
	s, err := fctest.Listen(filepath.Join(dir, "api.sock"), opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	c := NewClient(s.Socket())
	t.Cleanup(c.Close)
	ctx := context.Background()
	uds := filepath.Join(dir, "v.sock")
	for _, err := range []error{
		c.PutBootSource(ctx, BootSource{KernelImagePath: filepath.Join(dir, "vmlinux")}),
		c.PutVsock(ctx, Vsock{GuestCID: 3, UDSPath: uds}),
		c.InstanceStart(ctx),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return s, uds
}

// rawVsock is a unix socket that answers each connection with handle.
func rawVsock(t *testing.T, path string, handle func(net.Conn)) {
	t.Helper()
	ln, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go handle(c)
		}
	}()
}

func TestDial(t *testing.T) {
	for _, tc := range []struct {
		name string
		// raw, when set, replaces the fake's vsock with this handler.
		raw      func(net.Conn)
		listen   bool // a guest listens on the port
		deadline time.Duration
		wantErr  error
		reply    string
	}{
		{name: "guest listening", listen: true},
		{name: "no guest listener: refused", wantErr: ErrConnectRefused},
		{name: "not OK", raw: func(c net.Conn) {
			bufio.NewReader(c).ReadString('\n')
			c.Write([]byte("NOPE 3\n"))
		}, wantErr: ErrBadReply, reply: "NOPE 3"},
		{name: "OK without a port", raw: func(c net.Conn) {
			bufio.NewReader(c).ReadString('\n')
			c.Write([]byte("OK \n"))
		}, wantErr: ErrBadReply, reply: "OK "},
		{name: "endless reply", raw: func(c net.Conn) {
			bufio.NewReader(c).ReadString('\n')
			c.Write([]byte(strings.Repeat("x", 100)))
		}, wantErr: ErrBadReply},
		{name: "no answer within the deadline", raw: func(c net.Conn) {
			bufio.NewReader(c).ReadString('\n')
			io.Copy(io.Discard, c)
		}, deadline: 200 * time.Millisecond, wantErr: context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := shortDir(t)
			uds := filepath.Join(dir, "raw.sock")
			if tc.raw != nil {
				rawVsock(t, uds, tc.raw)
			} else {
				var s *fctest.Server
				s, uds = startedVM(t, dir, fctest.Options{})
				if tc.listen {
					s.ServeGuest(52, func(c net.Conn) { echoGuest(c, 52) })
				}
				defer noViolations(t, s.Calls())
			}
			ctx := context.Background()
			if tc.deadline > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.deadline)
				defer cancel()
			}
			conn, err := Dial(ctx, uds, 52)
			if tc.wantErr != nil {
				var ce *ConnectError
				if !errors.Is(err, tc.wantErr) || !errors.As(err, &ce) || ce.Port != 52 {
					t.Fatalf("Dial: %v, want a *ConnectError for port 52 wrapping %v", err, tc.wantErr)
				}
				if tc.reply != "" && ce.Reply != tc.reply {
					t.Errorf("Reply = %q, want %q", ce.Reply, tc.reply)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			// A handshake that ate the guest's first line would leave this
			// read waiting for it: the deadline turns that into a failure.
			conn.SetDeadline(time.Now().Add(5 * time.Second))
			br := bufio.NewReader(conn)
			if line, _ := br.ReadString('\n'); line != "port 52\n" {
				t.Fatalf("the guest's first line = %q, want %q (the handshake ate the guest's bytes?)", line, "port 52\n")
			}
			conn.Write([]byte("abc"))
			if err := conn.CloseWrite(); err != nil {
				t.Fatal(err)
			}
			if line, _ := br.ReadString('\n'); line != "got 3 bytes\n" {
				t.Fatalf("after the half-close the guest said %q, want %q", line, "got 3 bytes\n")
			}
		})
	}
}

// TestDialRetry: a guest still booting refuses; DialRetry keeps trying
// until its listener is up, and gives up with the refusal and the
// deadline when it never comes.
func TestDialRetry(t *testing.T) {
	for _, tc := range []struct {
		name    string
		late    bool // the guest's listener comes up after a refusal
		wantErr []error
	}{
		{name: "listener comes up late", late: true},
		{name: "listener never comes", wantErr: []error{ErrConnectRefused, context.DeadlineExceeded}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			refused := make(chan uint32, 100)
			s, uds := startedVM(t, shortDir(t), fctest.Options{OnVsockRefused: func(p uint32) { refused <- p }})
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if !tc.late {
				ctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
				defer cancel()
			}
			type result struct {
				conn *net.UnixConn
				err  error
			}
			res := make(chan result, 1)
			go func() {
				c, err := DialRetry(ctx, uds, 7)
				res <- result{c, err}
			}()
			if p := <-refused; p != 7 {
				t.Fatalf("refused port %d, want 7", p)
			}
			if tc.late {
				s.ServeGuest(7, func(c net.Conn) { echoGuest(c, 7) })
			}
			r := <-res
			for _, want := range tc.wantErr {
				if !errors.Is(r.err, want) {
					t.Errorf("DialRetry: %v, want it to wrap %v", r.err, want)
				}
			}
			if tc.wantErr != nil {
				return
			}
			if r.err != nil {
				t.Fatal(r.err)
			}
			defer r.conn.Close()
			if line, _ := bufio.NewReader(r.conn).ReadString('\n'); line != "port 7\n" {
				t.Fatalf("first line %q", line)
			}
			noViolations(t, s.Calls())
		})
	}
}

// TestVsockTransport: the wire's five streams, each to its own port, in
// wire.VMPorts order, each half-closable.
func TestVsockTransport(t *testing.T) {
	s, uds := startedVM(t, shortDir(t), fctest.Options{})
	guestPorts(s)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	tr := VsockTransport{UDSPath: uds}
	streams, err := tr.Open(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(streams) != len(VsockPorts()) {
		t.Fatalf("%d streams, want %d", len(streams), len(VsockPorts()))
	}
	for i, st := range streams {
		st.(*net.UnixConn).SetDeadline(time.Now().Add(5 * time.Second))
		br := bufio.NewReader(st)
		if line, _ := br.ReadString('\n'); line != fmt.Sprintf("port %d\n", VsockPortBase+i) {
			t.Errorf("stream %d reached %q", i, line)
		}
		st.Write([]byte("xy"))
		st.CloseWrite()
		if line, _ := br.ReadString('\n'); line != "got 2 bytes\n" {
			t.Errorf("stream %d: %q after the half-close", i, line)
		}
		st.Close()
	}
	noViolations(t, s.Calls())
}

// TestDialRetryCutMidAttempt: when the deadline cuts an attempt short (the
// device accepted, its answer slow: a loaded host), the error is still the
// guest's last refusal with the deadline, not the cut attempt's i/o
// timeout, so that a caller can tell a guest that never listened.
func TestDialRetryCutMidAttempt(t *testing.T) {
	uds := filepath.Join(shortDir(t), "v.sock")
	stuckIn := make(chan struct{}, 1)
	stuck := make(chan struct{})
	t.Cleanup(func() { close(stuck) })
	var n atomic.Int32
	rawVsock(t, uds, func(c net.Conn) {
		defer c.Close()
		bufio.NewReader(c).ReadString('\n')
		if n.Add(1) == 1 {
			return // closed at once: refused
		}
		stuckIn <- struct{}{}
		<-stuck // accepted, never answered
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		<-stuckIn // the attempt after the refusal hangs: end it now
		cancel()
	}()
	_, err := DialRetry(ctx, uds, 7)
	if !errors.Is(err, ErrConnectRefused) || !errors.Is(err, context.Canceled) {
		t.Errorf("DialRetry: %v, want the refusal and the end of ctx", err)
	}
}
