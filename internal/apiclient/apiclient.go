// Package apiclient owns the client side of the daemon's HTTP API
// (docs/api.md) as `dryexec run` uses it: finding the daemon of an install
// (the same discovery as the Python SDK), its calls and errors, and a
// trial's NDJSON stream. It imports only the standard library and the root
// package, so that the CLI's front (cmd/dryexec-front) links nothing else:
// a process that hands its trial to a daemon does not pay for the package
// initialisation of the engine (CEL, netsim, the OpenAPI mocks, …).
package apiclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/dryexec/dryexec"
)

// DefaultSocket is the unix socket a daemon of the state directory stateDir
// listens on by default: $XDG_RUNTIME_DIR/dryexec.sock, else
// STATEDIR/dryexec.sock.
func DefaultSocket(getenv func(string) string, stateDir string) string {
	if d := getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "dryexec.sock")
	}
	return filepath.Join(stateDir, "dryexec.sock")
}

// TokenFile is where a daemon with the state directory stateDir keeps the
// bearer token of its TCP listener.
func TokenFile(stateDir string) string { return filepath.Join(stateDir, "token") }

// StateDir is the daemon's state directory of the store home.
func StateDir(home string) string { return filepath.Join(home, "serve") }

// ErrNoDaemon: no daemon of this install answers (none does, or the one that
// does records its trials in another store). Nothing ran.
var ErrNoDaemon = errors.New("no dryexec daemon of this install answers")

// Conn is a daemon of this install that answered: the client end of its
// HTTP API, over its unix socket or TCP.
type Conn struct {
	w     *wire
	token string // TCP only
	// Where is the daemon's address, for messages: unix:PATH or the URL.
	Where string
	// sentinels are the errors an error code unwraps to (Error.Unwrap).
	sentinels map[string]error
}

// Find finds the daemon the Python SDK would, in the same order —
// $DRYEXEC_URL (with $DRYEXEC_TOKEN, else the token file), $DRYEXEC_SOCKET,
// the default socket — and checks that it answers and records its trials
// in home, the store this process's other commands (show, commit, ls) use:
// a daemon of another store is not this install's, its trials could not be
// committed from here. The error says why none fits (wrapping ErrNoDaemon).
// sentinels add to the errors an answered error code unwraps to (Error).
func Find(ctx context.Context, getenv func(string) string, home string, sentinels map[string]error) (*Conn, error) {
	c, err := Dial(getenv, home, sentinels)
	if err != nil {
		return nil, err
	}
	c.w.headWait = 0 // bounded by pctx below
	// A daemon that does not answer within a second is not one to wait for.
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var v struct {
		API  string `json:"api"`
		Home string `json:"home"`
	}
	if err := c.Call(pctx, "GET", "/v1/version", nil, &v); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrNoDaemon, c.Where, err)
	}
	if v.API != "v1" || v.Home == "" {
		return nil, fmt.Errorf("%w: %s is a daemon of another version (api %q, no home reported)", ErrNoDaemon, c.Where, v.API)
	}
	if !SameDir(v.Home, home) {
		return nil, fmt.Errorf("%w: the daemon on %s records its trials in %s, this install in %s", ErrNoDaemon, c.Where, v.Home, home)
	}
	return c, nil
}

// Dial is Find's discovery without its question: the daemon's address, not
// yet asked anything (nothing is connected until the first request). A
// caller that sends its trial with the request's "home" field lets the
// daemon check the store instead (409 other_home, before the trial starts),
// one round trip less than Find.
func Dial(getenv func(string) string, home string, sentinels map[string]error) (*Conn, error) {
	stateDir := StateDir(home)
	c := &Conn{sentinels: sentinels}
	if u := getenv("DRYEXEC_URL"); u != "" {
		tok := getenv("DRYEXEC_TOKEN")
		if tok == "" {
			b, _ := os.ReadFile(TokenFile(stateDir))
			tok = strings.TrimSpace(string(b))
		}
		hostport, ok := strings.CutPrefix(strings.TrimSuffix(u, "/"), "http://")
		if !ok || hostport == "" || strings.ContainsAny(hostport, "/?#@") {
			return nil, fmt.Errorf("%w: DRYEXEC_URL %q: want http://HOST:PORT", ErrNoDaemon, u)
		}
		addr := hostport
		if _, _, err := net.SplitHostPort(hostport); err != nil {
			addr = net.JoinHostPort(strings.Trim(hostport, "[]"), "80")
		}
		c.w, c.token, c.Where = &wire{network: "tcp", addr: addr, host: hostport}, tok, u
	} else {
		sock := getenv("DRYEXEC_SOCKET")
		if sock == "" {
			sock = DefaultSocket(getenv, stateDir)
			// The usual case without a daemon costs one stat.
			if fi, err := os.Stat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 {
				return nil, fmt.Errorf("%w: nothing listens on %s (start one with dryexec serve)", ErrNoDaemon, sock)
			}
		}
		c.w, c.Where = &wire{network: "unix", addr: sock, host: "dryexec"}, "unix:"+sock
	}
	// Nothing asked it yet: its first answer must start within a second,
	// as Find's question must.
	c.w.headWait = time.Second
	return c, nil
}

// SameDir reports whether a and b are the same directory (symlinks and bind
// mounts included): how a client and a daemon tell that they use one store.
func SameDir(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}

// send makes one request of the API; body, when not nil, is sent as JSON.
func (c *Conn) send(ctx context.Context, method, path string, body any, accept string) (*response, error) {
	var b []byte
	var hdr [][2]string
	if body != nil {
		var err error
		if b, err = json.Marshal(body); err != nil {
			return nil, err
		}
		hdr = append(hdr, [2]string{"Content-Type", "application/json"})
	}
	if accept != "" {
		hdr = append(hdr, [2]string{"Accept", accept})
	}
	if c.token != "" {
		hdr = append(hdr, [2]string{"Authorization", "Bearer " + c.token})
	}
	return c.w.do(ctx, method, path, hdr, b)
}

// Call makes one request and decodes its JSON answer into out; an error
// answer is an *Error.
func (c *Conn) Call(ctx context.Context, method, path string, body, out any) error {
	resp, err := c.send(ctx, method, path, body, "")
	if err != nil {
		return err
	}
	defer resp.close()
	if resp.status >= 300 {
		return c.readError(resp)
	}
	// Read to the end, so that the connection is reused by the next request.
	b, err := io.ReadAll(resp.body)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// Error is an error the daemon answered ({"error": {code, message}},
// docs/api.md "Errors"). It unwraps to the error the same failure is
// in-process, so that `run` exits with the same code either way.
type Error struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
	// is is what the code unwraps to (nil: nothing).
	is error
}

func (e *Error) Error() string {
	return fmt.Sprintf("the daemon refused the trial (%d %s): %s", e.Status, e.Code, e.Message)
}

func (e *Error) Unwrap() error { return e.is }

// bind sets what e unwraps to: the root package's errors for the codes it
// names, else the Conn's sentinels.
func (c *Conn) bind(e *Error) *Error {
	switch e.Code {
	case "bad_request":
		e.is = dryexec.ErrBadAction
	case "isolation_unavailable":
		e.is = dryexec.ErrIsolationUnavailable
	default:
		e.is = c.sentinels[e.Code]
	}
	return e
}

// readError reads an error answer.
func (c *Conn) readError(resp *response) error {
	var body struct {
		Error Error `json:"error"`
	}
	b, _ := io.ReadAll(io.LimitReader(resp.body, 1<<20))
	if err := json.Unmarshal(b, &body); err != nil || body.Error.Code == "" {
		return c.bind(&Error{Status: resp.status, Code: "internal", Message: strings.TrimSpace(string(b))})
	}
	body.Error.Status = resp.status
	return c.bind(&body.Error)
}

// BeforeStart marks a failure of a trial before the daemon started it:
// nothing ran, so a caller may run it elsewhere.
type BeforeStart struct{ Err error }

func (e BeforeStart) Error() string { return e.Err.Error() }
func (e BeforeStart) Unwrap() error { return e.Err }

// Hooks are what RunTrial tells its caller while the trial runs. Every field
// may be nil.
type Hooks struct {
	Queued         func()
	Started        func(id string)
	Stdout, Stderr io.Writer
}

// RunTrial runs the trial req (a POST /v1/trials body) through the daemon's
// NDJSON stream (docs/api.md, "Streaming"): the output as it comes, then the
// delta. A failure before the "started" event is a BeforeStart. Ending ctx
// closes the stream, which makes the daemon kill the trial and keep nothing
// of it.
func (c *Conn) RunTrial(ctx context.Context, req any, h Hooks) (*dryexec.StateDelta, error) {
	resp, err := c.send(ctx, "POST", "/v1/trials", req, "application/x-ndjson")
	if err != nil {
		return nil, BeforeStart{fmt.Errorf("%s: %w", c.Where, err)}
	}
	defer resp.close()
	if resp.status != 200 {
		return nil, BeforeStart{c.readError(resp)}
	}
	dec := json.NewDecoder(resp.body)
	started := false
	for {
		var ev struct {
			Event   string              `json:"event"`
			TrialID string              `json:"trial_id"`
			Data    string              `json:"data"`
			Delta   *dryexec.StateDelta `json:"delta"`
			Status  int                 `json:"status"`
			Error   *Error              `json:"error"`
		}
		if err := dec.Decode(&ev); err != nil {
			if errors.Is(err, io.EOF) {
				err = errors.New("the stream ended without the delta (did the daemon stop?)")
			}
			err = fmt.Errorf("the daemon on %s: %w", c.Where, err)
			if !started {
				return nil, BeforeStart{err}
			}
			return nil, err
		}
		switch ev.Event {
		case "queued":
			if h.Queued != nil {
				h.Queued()
			}
		case "started":
			started = true
			if h.Started != nil {
				h.Started(ev.TrialID)
			}
		case "stdout", "stderr":
			w := h.Stdout
			if ev.Event == "stderr" {
				w = h.Stderr
			}
			if w != nil {
				w.Write([]byte(ev.Data))
			}
		case "delta":
			if ev.Delta == nil {
				return nil, fmt.Errorf("the daemon on %s sent an empty delta", c.Where)
			}
			return ev.Delta, nil
		case "error":
			e := ev.Error
			if e == nil {
				e = &Error{Code: "internal", Message: "no error body"}
			}
			e.Status = ev.Status
			c.bind(e)
			if !started {
				return nil, BeforeStart{e}
			}
			return nil, e
		}
	}
}
