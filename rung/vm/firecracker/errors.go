package firecracker

import (
	"errors"
	"fmt"
	"strconv"
)

// APIError is Firecracker refusing a request: any status but the one the
// spec promises for success, with the fault_message of its Error body.
type APIError struct {
	Method, Path string
	Status       int
	// FaultMessage is Firecracker's own words ("" when the body had none).
	FaultMessage string
}

func (e *APIError) Error() string {
	msg := e.FaultMessage
	if msg == "" {
		msg = "no fault_message"
	}
	return "firecracker: " + e.Method + " " + e.Path + ": " + strconv.Itoa(e.Status) + ": " + msg
}

var (
	// ErrNoSocket: the API socket did not answer within the deadline.
	ErrNoSocket = errors.New("firecracker's API socket did not answer")
	// ErrExited: the process ended before its API socket answered.
	ErrExited = errors.New("firecracker ended before its API socket answered")
	// ErrConnectRefused: Firecracker closed a vsock connection instead of
	// acknowledging its CONNECT (no one listens on that port in the guest
	// yet, or the VM is gone).
	ErrConnectRefused = errors.New("vsock CONNECT refused")
	// ErrBadReply: the vsock's answer to CONNECT was not "OK <port>\n".
	ErrBadReply = errors.New("unexpected answer to vsock CONNECT")
	// ErrState: a Machine call out of the order Firecracker allows (it
	// would refuse it with a 400 anyway; the Machine says so before
	// asking).
	ErrState = errors.New("firecracker: call out of order")
)

// ConnectError is a failed host-initiated vsock connection.
type ConnectError struct {
	UDSPath string
	Port    uint32
	// Reply is what came back before the failure, if anything.
	Reply string
	Err   error
}

func (e *ConnectError) Error() string {
	s := fmt.Sprintf("vsock %s port %d: %v", e.UDSPath, e.Port, e.Err)
	if e.Reply != "" {
		s += fmt.Sprintf(" (answer %q)", e.Reply)
	}
	return s
}

func (e *ConnectError) Unwrap() error { return e.Err }
