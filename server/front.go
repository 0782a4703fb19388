package server

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/apiclient"
	"github.com/dryexec/dryexec/internal/front"
)

// FrontProtocol is the Upgrade token of POST /v1/front: the small front's
// connection (internal/smallfront; its C source documents the frames).
const FrontProtocol = "dryexec-front/1"

// Frame types the daemon sends the small front.
const (
	frameStdout   = 'o'
	frameStderr   = 'e'
	frameExit     = 'x'
	frameHandover = 'F'
)

// errFrontGone ends a small front's run whose connection closed: the
// process that asked is gone (killed, or its terminal closed).
var errFrontGone = errors.New("the small front's connection closed")

// frontCall is what the small front sends: its arguments (after the
// program's name), environment, working directory and terminals.
type frontCall struct {
	args, environ []string
	cwd           string
	tty           front.Terminals
}

// parseFrontCall reads the request body: records of a tag byte, a string
// and a NUL.
func parseFrontCall(b []byte) (frontCall, error) {
	var c frontCall
	for len(b) > 0 {
		rec, rest, ok := bytes.Cut(b, []byte{0})
		if !ok || len(rec) == 0 {
			return c, badRequest("POST /v1/front: a record without its tag or NUL")
		}
		v := string(rec[1:])
		switch rec[0] {
		case 'a':
			c.args = append(c.args, v)
		case 'e':
			c.environ = append(c.environ, v)
		case 'c':
			c.cwd = v
		case 't':
			c.tty = front.Terminals{Stdout: strings.Contains(v, "o"), Stderr: strings.Contains(v, "e")}
		default:
			return c, badRequest("POST /v1/front: unknown record tag %q", rec[0])
		}
		b = rest
	}
	return c, nil
}

// getenv is os.Getenv over environ: the first entry of a name.
func getenv(environ []string) func(string) string {
	m := make(map[string]string, len(environ))
	for _, kv := range environ {
		if k, v, ok := strings.Cut(kv, "="); ok {
			if _, dup := m[k]; !dup {
				m[k] = v
			}
		}
	}
	return func(k string) string { return m[k] }
}

// frontConn writes frames to the small front, one at a time.
type frontConn struct {
	mu   sync.Mutex
	conn net.Conn
	err  error
}

func (f *frontConn) frame(typ byte, p []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	b := make([]byte, 5, 5+len(p))
	b[0] = typ
	binary.LittleEndian.PutUint32(b[1:], uint32(len(p)))
	_, f.err = f.conn.Write(append(b, p...))
	return f.err
}

// frontStream is one of the caller's standard streams, as frames.
type frontStream struct {
	f   *frontConn
	typ byte
}

func (s frontStream) Write(p []byte) (int, error) {
	// Frames stay under the front's buffer (4 MiB).
	for rest := p; len(rest) > 0; {
		n := min(len(rest), 1<<20)
		if err := s.f.frame(s.typ, rest[:n]); err != nil {
			return len(p) - len(rest), err
		}
		rest = rest[n:]
	}
	return len(p), nil
}

// front serves the small front: `dryexec run` as the Go front would run it
// through this daemon (front.Serve), its output and exit code sent back as
// frames, or "not mine" before anything was written, for the Go front to
// handle as it always did. docs/api.md, "The small front".
func (a *api) front(w http.ResponseWriter, r *http.Request) error {
	if !strings.EqualFold(r.Header.Get("Upgrade"), FrontProtocol) {
		return &requestError{status: http.StatusUpgradeRequired, code: "upgrade_required",
			msg: fmt.Sprintf("POST /v1/front is the small front's stream: Upgrade: %s", FrontProtocol)}
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.opt.MaxBody))
	if err != nil {
		return badRequest("POST /v1/front: %v", err)
	}
	call, err := parseFrontCall(body)
	if err != nil {
		return err
	}
	conn, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return err
	}
	defer conn.Close()
	if _, err := io.WriteString(conn, "HTTP/1.1 101 Switching Protocols\r\nConnection: Upgrade\r\nUpgrade: "+FrontProtocol+"\r\n\r\n"); err != nil {
		return nil
	}
	ctx, cancel := context.WithCancelCause(r.Context())
	defer cancel(nil)
	go readSignals(rw.Reader, cancel)
	out := &frontConn{conn: conn}
	if call.cwd == "" {
		// getcwd failed there: the Go front says why.
		out.frame(frameHandover, nil)
		return nil
	}
	env := front.Env{Stdout: frontStream{out, frameStdout}, Stderr: frontStream{out, frameStderr},
		Getenv: getenv(call.environ), Environ: call.environ, Cwd: call.cwd, Terminals: &call.tty}
	code, handled := front.Serve(ctx, call.args, env, frontDaemon{a.svc}, "this daemon")
	if !handled {
		out.frame(frameHandover, nil)
		return nil
	}
	out.frame(frameExit, binary.LittleEndian.AppendUint32(nil, uint32(code)))
	return nil
}

// readSignals ends ctx when the small front forwards a signal ('I' SIGINT,
// 'T' SIGTERM) or its connection closes.
func readSignals(r *bufio.Reader, cancel context.CancelCauseFunc) {
	for {
		b, err := r.ReadByte()
		switch {
		case err != nil:
			cancel(errFrontGone)
			return
		case b == 'I':
			cancel(front.Interrupt(syscall.SIGINT))
		case b == 'T':
			cancel(front.Interrupt(syscall.SIGTERM))
		}
	}
}

// frontDaemon is this daemon as front.Serve's Daemon: RunTrial in-process,
// with the request read as POST /v1/trials reads it.
type frontDaemon struct{ svc *Service }

// trialRequest is req as POST /v1/trials would read it. The front's own
// request (front.TrialRequest, whose strings it checked for valid UTF-8) is
// copied field by field, which gives the same (TestFrontRequestCopied) for
// ≈ 0.05 ms less than its JSON there and back; anything else goes through
// JSON.
func trialRequest(req any) (TrialRequest, error) {
	if r, ok := req.(front.TrialRequest); ok {
		return TrialRequest{Argv: r.Argv, Cwd: r.Cwd, Env: r.Env, TimeoutMS: r.TimeoutMS, Rung: r.Rung,
			NoStore: r.NoStore, EnvExact: r.EnvExact, Home: r.Home}, nil
	}
	var tr TrialRequest
	b, err := json.Marshal(req)
	if err != nil {
		return tr, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	err = dec.Decode(&tr)
	return tr, err
}

func (d frontDaemon) RunTrial(ctx context.Context, req any, h apiclient.Hooks) (*dryexec.StateDelta, error) {
	tr, err := trialRequest(req)
	if err != nil {
		return nil, apiclient.BeforeStart{Err: err}
	}
	var started atomic.Bool
	hooks := TrialHooks{Queued: h.Queued, Stdout: h.Stdout, Stderr: h.Stderr, Started: func(id string) {
		started.Store(true)
		if h.Started != nil {
			h.Started(id)
		}
	}}
	delta, err := d.svc.RunTrial(ctx, tr, hooks)
	if err != nil && !started.Load() {
		return nil, apiclient.BeforeStart{Err: err}
	}
	return delta, err
}
