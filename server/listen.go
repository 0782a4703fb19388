package server

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/dryexec/dryexec/internal/apiclient"
)

// ServeOptions says where and how the daemon listens.
type ServeOptions struct {
	// Socket is the unix socket's path (used when Listen is empty).
	Socket string
	// Listen is a TCP address (host:port); every request then needs the
	// bearer token kept in the state dir.
	Listen string
	// Drain is how long SIGTERM (ctx's end) waits for running trials before
	// killing them (default 30 s).
	Drain time.Duration
	// Handler options (MCP, body limits); Token is filled for TCP.
	Handler HandlerOptions
	// Ready, if not nil, is called with the address once requests are
	// accepted.
	Ready func(addr string)
}

// DefaultSocket is $XDG_RUNTIME_DIR/dryexec.sock, else dryexec.sock in the
// state dir (never a shared directory like /tmp).
func DefaultSocket(getenv func(string) string, stateDir string) string {
	return apiclient.DefaultSocket(getenv, stateDir)
}

// Serve runs the daemon until ctx ends, then drains: it stops accepting,
// waits up to Drain for running trials, kills the rest, closes every session
// and removes the socket. svc is closed when Serve returns.
func Serve(ctx context.Context, svc *Service, opt ServeOptions) error {
	defer svc.Close()
	if opt.Drain <= 0 {
		opt.Drain = 30 * time.Second
	}
	var ln net.Listener
	var err error
	var addr string
	if opt.Listen != "" {
		tok, err := LoadOrCreateToken(TokenFile(svc.cfg.StateDir))
		if err != nil {
			return err
		}
		opt.Handler.Token = tok
		if ln, err = net.Listen("tcp", opt.Listen); err != nil {
			return fmt.Errorf("server: %w", err)
		}
		addr = ln.Addr().String()
		// From now on no rule of a trial or session may reach addr, and a
		// `dryexec run` of this install reads it from the state dir.
		svc.listen.Store(&addr)
		if err := os.WriteFile(ListenFile(svc.cfg.StateDir), []byte(addr+"\n"), 0o600); err != nil {
			ln.Close()
			return fmt.Errorf("server: %w", err)
		}
		defer os.Remove(ListenFile(svc.cfg.StateDir))
	} else {
		if ln, err = listenUnix(opt.Socket); err != nil {
			return err
		}
		addr = opt.Socket
		defer os.Remove(opt.Socket)
	}
	srv := &http.Server{Handler: Handler(svc, opt.Handler), ReadHeaderTimeout: 30 * time.Second,
		ErrorLog: nil, BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) }}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	svc.cfg.Log.Info("serving", "addr", addr, "max_trials", svc.cfg.MaxTrials)
	if opt.Ready != nil {
		opt.Ready(addr)
	}
	select {
	case err := <-errc:
		return fmt.Errorf("server: %w", err)
	case <-ctx.Done():
	}
	svc.cfg.Log.Info("draining", "timeout", opt.Drain)
	dctx, cancel := context.WithTimeout(context.Background(), opt.Drain)
	defer cancel()
	shut := make(chan error, 1)
	go func() { shut <- srv.Shutdown(dctx) }()
	if err := svc.Drain(dctx); err != nil {
		svc.cfg.Log.Warn("drain timed out; killing the trials still running")
	}
	// Sessions end now: their waiting requests (and host-call polls) return,
	// so Shutdown can finish.
	svc.Close()
	if err := <-shut; err != nil {
		srv.Close()
	}
	svc.cfg.Log.Info("stopped")
	return nil
}

// listenUnix listens on path with mode 0600 from the first instant: the socket
// is made in a private directory beside path and renamed into place. A stale
// socket (nobody answers) is removed; a live one is an error.
func listenUnix(path string) (net.Listener, error) {
	if path == "" {
		return nil, errors.New("server: no socket path")
	}
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	if info, err := os.Lstat(path); err == nil {
		if info.Mode()&os.ModeSocket == 0 {
			return nil, fmt.Errorf("server: %s exists and is not a socket; not touching it", path)
		}
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("server: a daemon is already listening on %s", path)
		}
		// Left by a daemon that was killed: nobody listens.
		os.Remove(path)
	}
	priv, err := os.MkdirTemp(dir, ".dryexec-sock-")
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	defer os.RemoveAll(priv)
	tmp := filepath.Join(priv, "s")
	ln, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, fmt.Errorf("server: %w", err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, 0o600); err != nil {
		ln.Close()
		return nil, fmt.Errorf("server: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		ln.Close()
		return nil, fmt.Errorf("server: %w", err)
	}
	return ln, nil
}
