package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/policy"
	"github.com/dryexec/dryexec/server"
)

// Where `dryexec run` runs its trial: --via, else $DRYEXEC_VIA, else auto
// (the user's daemon when one of this install answers, in-process
// otherwise). docs/api.md, "dryexec run through the daemon".
const (
	viaAuto   = "auto"
	viaDaemon = "daemon"
	viaLocal  = "local"
)

// viaMode is the --via value in effect: the flag, else DRYEXEC_VIA, else auto.
func viaMode(flag string, env Env) (string, error) {
	v, from := flag, "--via"
	if v == "" {
		v, from = env.Getenv("DRYEXEC_VIA"), "DRYEXEC_VIA"
	}
	switch v {
	case "":
		return viaAuto, nil
	case viaAuto, viaDaemon, viaLocal:
		return v, nil
	}
	return "", usageError{fmt.Errorf("%s %q: want auto (the daemon if one answers, else in-process), daemon or local", from, v)}
}

// errNoDaemon: `run --via daemon` found no daemon of this install to run its
// trial (none answers, or the one that does records its trials in another
// store). Nothing ran. Exit 1, like a rung that cannot run here: dryexec
// refuses rather than run the trial somewhere else than asked.
var errNoDaemon = errors.New("no dryexec daemon of this install answers")

// daemonConn is a daemon of this install that answered: the client end of
// the HTTP API of docs/api.md, over its unix socket or TCP.
type daemonConn struct {
	hc    *http.Client
	base  string // http://dryexec or http://HOST:PORT
	token string // TCP only
	where string // for messages: unix:PATH or the URL
}

// findDaemon finds the daemon the Python SDK would, in the same order —
// $DRYEXEC_URL (with $DRYEXEC_TOKEN, else the token file), $DRYEXEC_SOCKET,
// the default socket (server.DefaultSocket) — and checks that it answers and
// records its trials in home, the store this process's other commands
// (show, commit, ls) use. A daemon of another store is not this install's:
// its trials could not be committed from here. The error says why none fits
// (wrapping errNoDaemon).
func findDaemon(ctx context.Context, env Env, home string) (*daemonConn, error) {
	stateDir := filepath.Join(home, "serve")
	var c *daemonConn
	if u := env.Getenv("DRYEXEC_URL"); u != "" {
		tok := env.Getenv("DRYEXEC_TOKEN")
		if tok == "" {
			b, _ := os.ReadFile(server.TokenFile(stateDir))
			tok = strings.TrimSpace(string(b))
		}
		c = &daemonConn{hc: &http.Client{}, base: strings.TrimSuffix(u, "/"), token: tok, where: u}
	} else {
		sock := env.Getenv("DRYEXEC_SOCKET")
		if sock == "" {
			sock = server.DefaultSocket(env.Getenv, stateDir)
			// The usual case without a daemon costs one stat.
			if fi, err := os.Stat(sock); err != nil || fi.Mode()&os.ModeSocket == 0 {
				return nil, fmt.Errorf("%w: nothing listens on %s (start one with dryexec serve)", errNoDaemon, sock)
			}
		}
		var d net.Dialer
		tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return d.DialContext(ctx, "unix", sock)
		}}
		c = &daemonConn{hc: &http.Client{Transport: tr}, base: "http://dryexec", where: "unix:" + sock}
	}
	// A daemon that does not answer within a second is not one to wait for.
	pctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	var v struct {
		API  string `json:"api"`
		Home string `json:"home"`
	}
	if err := c.call(pctx, "GET", "/v1/version", nil, &v); err != nil {
		return nil, fmt.Errorf("%w: %s: %v", errNoDaemon, c.where, err)
	}
	if v.API != "v1" || v.Home == "" {
		return nil, fmt.Errorf("%w: %s is a daemon of another version (api %q, no home reported)", errNoDaemon, c.where, v.API)
	}
	if !sameDir(v.Home, home) {
		return nil, fmt.Errorf("%w: the daemon on %s records its trials in %s, this install in %s", errNoDaemon, c.where, v.Home, home)
	}
	return c, nil
}

// sameDir reports whether a and b are the same directory (symlinks and bind
// mounts included).
func sameDir(a, b string) bool {
	fa, err := os.Stat(a)
	if err != nil {
		return false
	}
	fb, err := os.Stat(b)
	return err == nil && os.SameFile(fa, fb)
}

// request builds a request of the API; body, when not nil, is sent as JSON.
func (c *daemonConn) request(ctx context.Context, method, path string, body any) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	return req, nil
}

// call makes one request and decodes its JSON answer into out; an error
// answer is a *daemonError.
func (c *daemonConn) call(ctx context.Context, method, path string, body, out any) error {
	req, err := c.request(ctx, method, path, body)
	if err != nil {
		return err
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		return readDaemonError(resp)
	}
	// Read to the end, so that the connection is reused by the next request.
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

// daemonError is an error the daemon answered ({"error": {code, message}},
// docs/api.md "Errors"). It unwraps to the error the same failure is
// in-process, so that `run` exits with the same code either way.
type daemonError struct {
	Status  int    `json:"-"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

func (e *daemonError) Error() string {
	return fmt.Sprintf("the daemon refused the trial (%d %s): %s", e.Status, e.Code, e.Message)
}

func (e *daemonError) Unwrap() error {
	switch e.Code {
	case "bad_request":
		return dryexec.ErrBadAction
	case "policy":
		return policy.ErrInvalid
	case "isolation_unavailable":
		return dryexec.ErrIsolationUnavailable
	case "busy":
		return server.ErrBusy
	}
	return nil
}

// readDaemonError reads an error answer.
func readDaemonError(resp *http.Response) error {
	var body struct {
		Error daemonError `json:"error"`
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err := json.Unmarshal(b, &body); err != nil || body.Error.Code == "" {
		return &daemonError{Status: resp.StatusCode, Code: "internal", Message: strings.TrimSpace(string(b))}
	}
	body.Error.Status = resp.StatusCode
	return &body.Error
}
