package fctest

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/dryexec/dryexec/wire"
)

// Environment of Main.
const (
	// ModeEnv selects how the process behaves: "" serves the API; "silent"
	// never creates its socket (a VMM stuck before its API is up); "exit"
	// prints a message and exits 1 at once.
	ModeEnv = "FCTEST_MODE"
	// LogEnv names a file each answered call is appended to, as a JSON
	// line (a Call), so that the test can check a process's requests.
	LogEnv = "FCTEST_LOG"
	// RefuseEnv lists requests ("METHOD /path", separated by ";") the
	// fake refuses with a fault of its own, as Refuse does in a test's
	// process.
	RefuseEnv = "FCTEST_REFUSE"
	// GuestEnv plays a guest on the vsock: "hello" has the guest listen
	// on GuestPortsEnv's ports and greet on the first with the wire's
	// hello (a vm-trial's, this wire version), as the VM's init does;
	// "garbage" greets with bytes that are no wire frame; "" runs no
	// guest (every CONNECT is refused).
	GuestEnv = "FCTEST_GUEST"
	// GuestPortsEnv is the guest's first vsock port; it listens on as
	// many as the wire has streams (wire.VMPorts), from it.
	GuestPortsEnv = "FCTEST_GUEST_PORT"
)

// RefusedFault is the fault_message of a refusal RefuseEnv asked for.
const RefusedFault = "fctest: refused as asked"

// Main is the fake as a process: a test binary's TestMain calls it when
// the binary stands in for `firecracker` (the driver launches it with
// `--api-sock PATH`, and the jailer adds `--id=ID`). It serves until
// SIGTERM or SIGINT, or until the VM shuts down (SendCtrlAltDel), and
// returns the exit code.
func Main(args []string) int { return MainBacked(args, nil) }

// MainBacked is Main with a Backend (Options.Backend): at InstanceStart
// the fake boots a real VM from what the API configured, whose guest
// answers on the vsock (at snapshot/load it restores one). GuestEnv must then be empty. The process ends
// when that VM does (Started.Reset), as Firecracker's ends with its
// guest.
func MainBacked(args []string, backend func(Started) (*BackendVM, error)) int {
	var sock, id string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--api-sock" && i+1 < len(args):
			i++
			sock = args[i]
		case strings.HasPrefix(a, "--api-sock="):
			sock = strings.TrimPrefix(a, "--api-sock=")
		case a == "--id" && i+1 < len(args):
			i++
			id = args[i]
		case strings.HasPrefix(a, "--id="):
			id = strings.TrimPrefix(a, "--id=")
		default:
			fmt.Fprintf(os.Stderr, "fctest: unknown argument %q\n", a)
			return 2
		}
	}
	if sock == "" {
		fmt.Fprintln(os.Stderr, "fctest: --api-sock is required")
		return 2
	}
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	switch os.Getenv(ModeEnv) {
	case "silent":
		<-sig
		return 0
	case "exit":
		fmt.Fprintln(os.Stderr, "fctest: exiting as asked (Error creating the vmm: no KVM)")
		return 1
	}
	opt := Options{ID: id, Backend: backend}
	if p := os.Getenv(LogEnv); p != "" {
		f, err := os.OpenFile(p, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			fmt.Fprintln(os.Stderr, "fctest:", err)
			return 2
		}
		defer f.Close()
		enc := json.NewEncoder(f)
		opt.OnCall = func(c Call) { enc.Encode(c) }
	}
	s, err := Listen(sock, opt)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fctest:", err)
		return 1
	}
	defer s.Close()
	for _, mp := range strings.Split(os.Getenv(RefuseEnv), ";") {
		if mp != "" {
			s.Refuse(mp, RefusedFault)
		}
	}
	if err := serveGuest(s, os.Getenv(GuestEnv), os.Getenv(GuestPortsEnv)); err != nil {
		fmt.Fprintln(os.Stderr, "fctest:", err)
		return 2
	}
	select {
	case <-sig:
	case <-s.Exited():
	}
	return 0
}

// serveGuest plays the guest GuestEnv asks for.
func serveGuest(s *Server, mode, firstPort string) error {
	if mode == "" {
		return nil
	}
	base, err := strconv.ParseUint(firstPort, 10, 32)
	if err != nil {
		return fmt.Errorf("%s=%q: %w", GuestPortsEnv, firstPort, err)
	}
	var greet func(net.Conn)
	switch mode {
	case "hello":
		greet = func(c net.Conn) {
			wire.NewConn(c).Send(wire.KindHello, "", 0, wire.Hello{Version: wire.Version, Role: wire.RoleVMTrial})
		}
	case "garbage":
		greet = func(c net.Conn) { c.Write([]byte("not a wire frame\n")) }
	default:
		return fmt.Errorf("%s=%q: hello, garbage or empty", GuestEnv, mode)
	}
	for i := range wire.VMPorts() {
		h := func(c net.Conn) { io.Copy(io.Discard, c) }
		if i == 0 {
			h = func(c net.Conn) { greet(c); io.Copy(io.Discard, c) }
		}
		s.ServeGuest(uint32(base)+uint32(i), h)
	}
	return nil
}
