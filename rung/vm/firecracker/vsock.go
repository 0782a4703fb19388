package firecracker

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/dryexec/dryexec/wire"
)

// Stream is the host's end of one of the wire's streams: the host
// half-closes stdin's and the stub's to give the guest their end-of-file,
// as it does on the QEMU rung's virtio-serial sockets.
type Stream interface {
	io.ReadWriteCloser
	CloseWrite() error
}

// Transport is the host's half of the wire's streams to a VM: one stream
// per wire.VMPorts name, in that order. rung/vm's own transport interface
// is QEMU's command line (Args); a VMM configured over an API has no
// command line to add to, so the host's side is this one call, made once
// the VM is started.
type Transport interface {
	// Name says which it is, for notes.
	Name() string
	// Open returns the host's end of each stream, in wire.VMPorts order,
	// waiting (within ctx) for the guest to be ready for them.
	Open(ctx context.Context) ([]Stream, error)
}

// VsockPortBase is the guest's vsock port for the first of the wire's
// streams (wire.VMPorts()[0], ctrl); stream i is on VsockPortBase+i. The
// guest listens on them; the host connects (Firecracker's host-initiated
// direction), so the host needs no listening socket of its own.
const VsockPortBase = wire.VMVsockPortBase

// VsockPorts returns the guest's vsock port for each wire.VMPorts name, in
// that order.
func VsockPorts() []uint32 {
	ports := make([]uint32, len(wire.VMPorts()))
	for i := range ports {
		ports[i] = VsockPortBase + uint32(i)
	}
	return ports
}

// maxReply bounds the acknowledgement line: "OK " and a 32-bit port.
const maxReply = 32

// Dial makes one host-initiated vsock connection through Firecracker's
// vsock socket uds to the guest's port: it connects, sends "CONNECT
// <port>\n" and reads "OK <host port>\n". Firecracker closes the
// connection instead when no one in the guest listens on the port: that is
// a *ConnectError wrapping ErrConnectRefused. Nothing past the
// acknowledgement is read: what follows is the guest's.
func Dial(ctx context.Context, uds string, port uint32) (*net.UnixConn, error) {
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", uds)
	if err != nil {
		return nil, &ConnectError{UDSPath: uds, Port: port, Err: err}
	}
	conn := c.(*net.UnixConn)
	// ctx's end (not a deadline of the socket's own, which could pass
	// before ctx reports it) ends a handshake stuck on a VMM that does not
	// answer, so the error is ctx's.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	reply, err := handshake(conn, port)
	if !stop() || err != nil {
		conn.Close()
		if err == nil || ctx.Err() != nil {
			err = errors.Join(err, context.Cause(ctx))
		}
		return nil, &ConnectError{UDSPath: uds, Port: port, Reply: reply, Err: err}
	}
	conn.SetDeadline(time.Time{})
	return conn, nil
}

// handshake sends CONNECT and reads the acknowledgement a byte at a time,
// so that none of the guest's first bytes is taken with it.
func handshake(conn *net.UnixConn, port uint32) (string, error) {
	if _, err := conn.Write([]byte("CONNECT " + strconv.FormatUint(uint64(port), 10) + "\n")); err != nil {
		return "", fmt.Errorf("%w: %w", ErrConnectRefused, err)
	}
	var line []byte
	b := make([]byte, 1)
	for {
		n, err := conn.Read(b)
		if n == 1 {
			if b[0] == '\n' {
				break
			}
			line = append(line, b[0])
			if len(line) > maxReply {
				return string(line), ErrBadReply
			}
			continue
		}
		if errors.Is(err, io.EOF) || errors.Is(err, syscall.ECONNRESET) {
			return string(line), ErrConnectRefused
		}
		return string(line), err
	}
	s := string(line)
	hostPort, ok := strings.CutPrefix(s, "OK ")
	if _, err := strconv.ParseUint(hostPort, 10, 32); !ok || err != nil {
		return s, ErrBadReply
	}
	return s, nil
}

// retryable says whether a failed Dial may succeed later: the socket is
// not there yet (Firecracker creates it with the device), or the guest
// does not listen yet (it is still booting).
func retryable(err error) bool {
	return errors.Is(err, ErrConnectRefused) || errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED)
}

// DialRetry dials until the guest accepts or ctx ends; a guest that is
// still booting refuses. The last refusal is returned with ctx's cause.
func DialRetry(ctx context.Context, uds string, port uint32) (*net.UnixConn, error) {
	wait := 2 * time.Millisecond
	var last error // the guest's last refusal
	for {
		conn, err := Dial(ctx, uds, port)
		if err == nil {
			return conn, nil
		}
		if ctx.Err() != nil {
			// ctx cut this attempt short (an i/o timeout of its own, on a
			// loaded host): the refusal before it is what the guest said.
			if last == nil {
				last = err
			}
			return nil, errors.Join(last, context.Cause(ctx))
		}
		if !retryable(err) {
			return nil, err
		}
		last = err
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, errors.Join(err, context.Cause(ctx))
		case <-t.C:
		}
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// VsockTransport carries the wire's streams over Firecracker's vsock:
// stream i is a host-initiated connection to the guest's port
// VsockPorts()[i] through the device's socket UDSPath.
type VsockTransport struct {
	UDSPath string
}

var _ Transport = VsockTransport{}

// Name implements Transport.
func (VsockTransport) Name() string { return "vsock" }

// Open implements Transport: it connects the streams in order, each
// retried until the guest listens or ctx ends.
func (t VsockTransport) Open(ctx context.Context) ([]Stream, error) {
	var streams []Stream
	for _, port := range VsockPorts() {
		c, err := DialRetry(ctx, t.UDSPath, port)
		if err != nil {
			for _, s := range streams {
				s.Close()
			}
			return nil, err
		}
		streams = append(streams, c)
	}
	return streams, nil
}
