package fctest

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
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
)

// Main is the fake as a process: a test binary's TestMain calls it when
// the binary stands in for `firecracker` (the driver launches it with
// `--api-sock PATH`, and the jailer adds `--id=ID`). It serves until
// SIGTERM or SIGINT, or until the VM shuts down (SendCtrlAltDel), and
// returns the exit code.
func Main(args []string) int {
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
	opt := Options{ID: id}
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
	select {
	case <-sig:
	case <-s.Exited():
	}
	return 0
}
