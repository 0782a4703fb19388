package server

import (
	"archive/tar"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/session"
	"github.com/dryexec/dryexec/wire"
)

//go:embed openapi.json
var openapiDoc []byte

// OpenAPI returns the API's OpenAPI 3 document.
func OpenAPI() []byte { return append([]byte(nil), openapiDoc...) }

// Limits on request bodies: JSON bodies are small (code, commands, codec
// values); a pushed tree is streamed to a temp file first.
const (
	DefaultMaxBody = 16 << 20
	DefaultMaxPush = 1 << 30
	// longPoll is how long GET .../hostcalls waits for a call before 204.
	longPoll = 25 * time.Second
)

// HandlerOptions configures the HTTP face of a Service.
type HandlerOptions struct {
	// Token, when not empty, is required as "Authorization: Bearer TOKEN" on
	// every request (the TCP listener); empty means the transport already
	// authenticates (the unix socket is mode 0600).
	Token string
	// MaxBody bounds JSON request bodies (default DefaultMaxBody); MaxPush
	// bounds a pushed tree (default DefaultMaxPush).
	MaxBody, MaxPush int64
	// MCP, when not nil, is served at /mcp (behind the same auth).
	MCP http.Handler
}

// route is one API endpoint; routes() is the list the mux is built from and
// the OpenAPI test compares with openapi.json.
type route struct {
	method, pattern string
	h               func(w http.ResponseWriter, r *http.Request) error
}

type api struct {
	svc *Service
	opt HandlerOptions
}

func (a *api) routes() []route {
	return []route{
		{"GET", "/v1/health", a.health},
		{"GET", "/v1/version", a.version},
		{"GET", "/v1/openapi.json", a.openapi},
		{"POST", "/v1/trials", a.createTrial},
		{"POST", "/v1/front", a.front},
		{"GET", "/v1/trials", a.listTrials},
		{"GET", "/v1/trials/{id}", a.getTrial},
		{"GET", "/v1/trials/{id}/network", a.getTrialNetwork},
		{"POST", "/v1/trials/{id}/commit", a.commitTrial},
		{"POST", "/v1/trials/{id}/discard", a.discardTrial},
		{"POST", "/v1/sessions", a.openSession},
		{"GET", "/v1/sessions", a.listSessions},
		{"GET", "/v1/sessions/{id}", a.getSession},
		{"DELETE", "/v1/sessions/{id}", a.closeSession},
		{"POST", "/v1/sessions/{id}/park", a.parkSession},
		{"GET", "/v1/parked", a.listParked},
		{"POST", "/v1/parked/{id}/resume", a.resumeSession},
		{"DELETE", "/v1/parked/{id}", a.dropParked},
		{"POST", "/v1/sessions/{id}/ping", a.ping},
		{"POST", "/v1/sessions/{id}/shell", a.shell},
		{"POST", "/v1/sessions/{id}/python", a.python},
		{"POST", "/v1/sessions/{id}/diff", a.diff},
		{"POST", "/v1/sessions/{id}/reset", a.reset},
		{"POST", "/v1/sessions/{id}/fork", a.forkSession},
		{"POST", "/v1/sessions/{id}/keep", a.keepBranch},
		{"POST", "/v1/compare", a.compare},
		{"PUT", "/v1/sessions/{id}/tree", a.pushTree},
		{"GET", "/v1/sessions/{id}/events", a.events},
		{"GET", "/v1/sessions/{id}/network", a.network},
		{"GET", "/v1/sessions/{id}/cache", a.cacheKeys},
		{"GET", "/v1/sessions/{id}/cache/{key}", a.cacheGet},
		{"PUT", "/v1/sessions/{id}/cache/{key}", a.cacheSet},
		{"DELETE", "/v1/sessions/{id}/cache/{key}", a.cacheDel},
		{"GET", "/v1/sessions/{id}/hostcalls", a.nextHostCall},
		{"POST", "/v1/sessions/{id}/hostcalls/{call}", a.answerHostCall},
	}
}

// Routes lists the API's endpoints as "METHOD /pattern", as openapi.json
// documents them.
func Routes() []string {
	var out []string
	for _, rt := range (&api{}).routes() {
		out = append(out, rt.method+" "+rt.pattern)
	}
	return out
}

// Handler serves svc's API.
func Handler(svc *Service, opt HandlerOptions) http.Handler {
	if opt.MaxBody <= 0 {
		opt.MaxBody = DefaultMaxBody
	}
	if opt.MaxPush <= 0 {
		opt.MaxPush = DefaultMaxPush
	}
	a := &api{svc: svc, opt: opt}
	mux := http.NewServeMux()
	methods := map[string][]string{}
	for _, rt := range a.routes() {
		mux.Handle(rt.method+" "+rt.pattern, a.wrap(rt.h))
		methods[rt.pattern] = append(methods[rt.pattern], rt.method)
	}
	// Unknown paths and methods get the same JSON error shape as the rest.
	for p, ms := range methods {
		allow := strings.Join(ms, ", ")
		mux.Handle(p, a.wrap(func(w http.ResponseWriter, r *http.Request) error {
			w.Header().Set("Allow", allow)
			return &requestError{status: http.StatusMethodNotAllowed, code: "method_not_allowed", msg: fmt.Sprintf("%s %s: allowed methods are %s", r.Method, r.URL.Path, allow)}
		}))
	}
	mux.Handle("/", a.wrap(func(w http.ResponseWriter, r *http.Request) error {
		return &requestError{status: http.StatusNotFound, code: "no_route", msg: fmt.Sprintf("no such endpoint: %s %s (see /v1/openapi.json)", r.Method, r.URL.Path)}
	}))
	if opt.MCP != nil {
		mux.Handle("/mcp", opt.MCP)
		mux.Handle("/mcp/", opt.MCP)
	}
	return a.auth(a.busy(mux))
}

// busy tells Config.Busy of each request that may run something while it
// is served: every method but GET, which only reads (and whose streams,
// events and MCP's notifications, stay open for as long as a client
// listens).
func (a *api) busy(next http.Handler) http.Handler {
	if a.svc.cfg.Busy == nil {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			defer a.svc.cfg.Busy(false)()
		}
		next.ServeHTTP(w, r)
	})
}

// auth refuses, before anything runs, a request without the bearer token.
func (a *api) auth(next http.Handler) http.Handler {
	if a.opt.Token == "" {
		return next
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || !tokenOK(got, a.opt.Token) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="dryexec"`)
			writeJSON(w, http.StatusUnauthorized, map[string]APIError{"error": {Code: "unauthorized",
				Message: "missing or wrong bearer token (Authorization: Bearer TOKEN; the token is in the daemon's state dir, file token)"}})
			return
		}
		next.ServeHTTP(w, r)
	})
}

func (a *api) wrap(h func(http.ResponseWriter, *http.Request) error) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := h(w, r); err != nil {
			status, body := classify(err)
			if status == http.StatusServiceUnavailable && body.Code == "busy" {
				w.Header().Set("Retry-After", "1")
			}
			if status >= 500 {
				a.svc.cfg.Log.Warn("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
			}
			writeJSON(w, status, map[string]APIError{"error": body})
		}
	})
}

func writeJSON(w http.ResponseWriter, status int, v any) error {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	if d, ok := v.(*dryexec.StateDelta); ok && d.Spilled() {
		// One change at a time from where the trial spilled them, never
		// the whole document in memory.
		return d.WriteJSON(w)
	}
	return json.NewEncoder(w).Encode(v)
}

// decode reads exactly one JSON value of the request body into v: unknown
// fields, trailing data, a wrong content type or a body over the limit are
// refused with a message saying which.
func (a *api) decode(w http.ResponseWriter, r *http.Request, v any, optional bool) error {
	if err := checkJSONType(r, optional); err != nil {
		return err
	}
	body := http.MaxBytesReader(w, r.Body, a.opt.MaxBody)
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		var mb *http.MaxBytesError
		var se *json.SyntaxError
		var te *json.UnmarshalTypeError
		switch {
		case errors.Is(err, io.EOF) && optional:
			return nil
		case errors.Is(err, io.EOF):
			return badRequest("the request body is empty; want a JSON object")
		case errors.As(err, &mb):
			return err
		case errors.As(err, &se):
			return badRequest("bad JSON at byte %d: %v", se.Offset, err)
		case errors.As(err, &te):
			return badRequest("bad JSON: field %q: %v is not a %v", te.Field, te.Value, te.Type)
		case strings.HasPrefix(err.Error(), "json: unknown field"):
			return badRequest("bad JSON: %s", strings.TrimPrefix(err.Error(), "json: "))
		}
		return badRequest("bad JSON: %v", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return err
		}
		return badRequest("bad JSON: data after the object")
	}
	return nil
}

// checkJSONType refuses, with 415, a body that is not declared JSON. A body
// without a Content-Type is refused too (the docs promise 415, and a client
// that forgot the header would otherwise depend on our guessing); a POST that
// sends no body at all where the body is optional (discard, reset, ping…)
// needs no header, so that `curl -X POST …/discard` works.
func checkJSONType(r *http.Request, optional bool) error {
	ct := r.Header.Get("Content-Type")
	if ct == "" {
		if optional && r.ContentLength == 0 {
			return nil
		}
		return &requestError{status: http.StatusUnsupportedMediaType, code: "unsupported_media_type",
			msg: "the request has a body but no Content-Type: send Content-Type: application/json"}
	}
	if mt, _, err := mime.ParseMediaType(ct); err != nil || mt != "application/json" {
		return &requestError{status: http.StatusUnsupportedMediaType, code: "unsupported_media_type", msg: fmt.Sprintf("Content-Type %q: want application/json", ct)}
	}
	return nil
}

func (a *api) health(w http.ResponseWriter, r *http.Request) error {
	running, queued, sessions := a.svc.Counts()
	h := map[string]any{"ok": true, "trials_running": running, "trials_queued": queued, "sessions": sessions,
		"max_trials": a.svc.cfg.MaxTrials, "max_queue": a.svc.cfg.MaxQueue}
	if a.svc.pool != nil {
		h["pool"] = poolStats(a.svc.pool)
	}
	if a.svc.vmPool != nil {
		h["vm_pool"] = poolStats(a.svc.vmPool)
	}
	for key, p := range map[string]*session.Pool{"session_pool": a.svc.sessionPool, "vm_session_pool": a.svc.vmSessionPool} {
		if p == nil {
			continue
		}
		st := p.Stats()
		h[key] = map[string]any{"size": st.Size, "ready": st.Ready, "busy": st.Busy, "hits": st.Hits,
			"misses": st.Misses, "failed": st.Failed, "last_error": st.LastError}
	}
	return writeJSON(w, 200, h)
}

func (a *api) version(w http.ResponseWriter, r *http.Request) error {
	// home lets a client of this install (`dryexec run`) tell that the
	// daemon records trials where its own commands look for them.
	home := a.svc.cfg.StoreDir
	if abs, err := filepath.Abs(home); err == nil {
		home = abs
	}
	return writeJSON(w, 200, map[string]any{"version": a.svc.cfg.Version, "api": "v1", "schema": dryexec.SchemaV1, "wire": wire.Version, "home": home})
}

func (a *api) openapi(w http.ResponseWriter, r *http.Request) error {
	w.Header().Set("Content-Type", "application/json")
	_, err := w.Write(openapiDoc)
	return err
}

// ---- trials

// createTrial runs a trial. With "Accept: application/x-ndjson" the answer is
// a stream of events, one JSON object a line, flushed as they happen:
// {"event":"queued"}, {"event":"started","trial_id":…},
// {"event":"stdout"|"stderr","data":…} and last {"event":"delta","delta":…}
// or {"event":"error","error":{…}}.
func (a *api) createTrial(w http.ResponseWriter, r *http.Request) error {
	var req TrialRequest
	if err := a.decode(w, r, &req, false); err != nil {
		return err
	}
	if !strings.Contains(r.Header.Get("Accept"), "application/x-ndjson") {
		d, err := a.svc.RunTrial(r.Context(), req, TrialHooks{})
		if err != nil {
			return err
		}
		w.Header().Set("Location", "/v1/trials/"+d.TrialID)
		return writeJSON(w, http.StatusCreated, d)
	}
	if err := req.check(); err != nil {
		return err
	}
	st := &eventStream{w: w}
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	d, err := a.svc.RunTrial(r.Context(), req, TrialHooks{
		Queued:  func() { st.send(map[string]any{"event": "queued"}) },
		Started: func(id string) { st.send(map[string]any{"event": "started", "trial_id": id}) },
		Stdout:  st.output("stdout"),
		Stderr:  st.output("stderr"),
	})
	if err != nil {
		status, body := classify(err)
		st.send(map[string]any{"event": "error", "status": status, "error": body})
		return nil
	}
	st.send(map[string]any{"event": "delta", "delta": d})
	return nil
}

// eventStream writes NDJSON events, one at a time, flushing each.
type eventStream struct {
	mu sync.Mutex // serialises events from the stdout and stderr copiers
	w  http.ResponseWriter
}

func (s *eventStream) send(v any) {
	b, _ := json.Marshal(v)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.w.Write(append(b, '\n'))
	http.NewResponseController(s.w).Flush()
}

type streamWriter struct {
	s    *eventStream
	name string
}

func (sw streamWriter) Write(p []byte) (int, error) {
	sw.s.send(map[string]any{"event": sw.name, "data": string(p)})
	return len(p), nil
}

func (s *eventStream) output(name string) io.Writer { return streamWriter{s, name} }

func (a *api) listTrials(w http.ResponseWriter, r *http.Request) error {
	list, err := a.svc.Trials()
	if err != nil {
		return err
	}
	return writeJSON(w, 200, map[string]any{"trials": list})
}

func (a *api) getTrial(w http.ResponseWriter, r *http.Request) error {
	d, st, err := a.svc.Trial(r.PathValue("id"))
	if err != nil {
		return err
	}
	w.Header().Set("X-Dryexec-Status", st.Status)
	return writeJSON(w, 200, d)
}

func (a *api) getTrialNetwork(w http.ResponseWriter, r *http.Request) error {
	recs, err := a.svc.TrialExchanges(r.PathValue("id"))
	if err != nil {
		return err
	}
	if recs == nil {
		recs = []byte("[]")
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(200)
	_, err = w.Write(append(recs, '\n'))
	return err
}

func (a *api) commitTrial(w http.ResponseWriter, r *http.Request) error {
	var req CommitRequest
	if err := a.decode(w, r, &req, true); err != nil {
		return err
	}
	applied, err := a.svc.Commit(r.Context(), r.PathValue("id"), req)
	if err != nil {
		return err
	}
	return writeJSON(w, 200, map[string]any{"trial_id": r.PathValue("id"), "applied": applied})
}

func (a *api) discardTrial(w http.ResponseWriter, r *http.Request) error {
	if err := a.decode(w, r, &struct{}{}, true); err != nil {
		return err
	}
	if err := a.svc.Discard(r.PathValue("id")); err != nil {
		return err
	}
	return writeJSON(w, 200, map[string]any{"trial_id": r.PathValue("id"), "discarded": true})
}

// ---- sessions

func (a *api) live(r *http.Request) (*Live, error) {
	id := r.PathValue("id")
	if !validSessionID(id) {
		return nil, badRequest("%q is not a session id (se_ and 20 letters or digits)", id)
	}
	return a.svc.Session(id)
}

func (a *api) openSession(w http.ResponseWriter, r *http.Request) error {
	var req SessionRequest
	if err := a.decode(w, r, &req, true); err != nil {
		return err
	}
	l, err := a.svc.OpenSession(r.Context(), req)
	if err != nil {
		return err
	}
	w.Header().Set("Location", "/v1/sessions/"+l.ID)
	return writeJSON(w, http.StatusCreated, l.Info())
}

func (a *api) listSessions(w http.ResponseWriter, r *http.Request) error {
	return writeJSON(w, 200, map[string]any{"sessions": a.svc.Sessions()})
}

func (a *api) getSession(w http.ResponseWriter, r *http.Request) error {
	l, err := a.live(r)
	if err != nil {
		return err
	}
	return writeJSON(w, 200, l.Info())
}

func (a *api) closeSession(w http.ResponseWriter, r *http.Request) error {
	if _, err := a.live(r); err != nil {
		return err
	}
	if err := a.svc.CloseSession(r.PathValue("id")); err != nil {
		return err
	}
	return writeJSON(w, 200, map[string]any{"session_id": r.PathValue("id"), "closed": true})
}

func (a *api) ping(w http.ResponseWriter, r *http.Request) error {
	l, err := a.live(r)
	if err != nil {
		return err
	}
	p, err := l.Session.Ping(r.Context())
	if err != nil {
		return err
	}
	return writeJSON(w, 200, p)
}

// ShellRequest is one shell exec.
type ShellRequest struct {
	Command   string `json:"command"`
	TimeoutMS int64  `json:"timeout_ms,omitempty"`
	// Caps are this exec's output caps (total) over the session's output_cap.
	Caps *wire.Caps `json:"caps,omitempty"`
}

func (a *api) shell(w http.ResponseWriter, r *http.Request) error {
	l, err := a.live(r)
	if err != nil {
		return err
	}
	var req ShellRequest
	if err := a.decode(w, r, &req, false); err != nil {
		return err
	}
	if req.TimeoutMS < 0 {
		return badRequest("timeout_ms must not be negative")
	}
	if err := checkCaps(req.Caps); err != nil {
		return err
	}
	res, err := l.Session.ShellWith(r.Context(), req.Command, session.ShellOptions{Timeout: time.Duration(req.TimeoutMS) * time.Millisecond, Caps: req.Caps})
	if err != nil {
		return err
	}
	return writeJSON(w, 200, res)
}

// PythonRequest is one Python exec. Inputs go through the codec (wire.Value).
type PythonRequest struct {
	Code      string                `json:"code"`
	Inputs    map[string]wire.Value `json:"inputs,omitempty"`
	TimeoutMS int64                 `json:"timeout_ms,omitempty"`
	// CacheReadOnly refuses this exec's cache writes.
	CacheReadOnly bool `json:"cache_readonly,omitempty"`
	// Caps are this exec's output caps (entry, total).
	Caps *wire.Caps `json:"caps,omitempty"`
}

func (a *api) python(w http.ResponseWriter, r *http.Request) error {
	l, err := a.live(r)
	if err != nil {
		return err
	}
	var req PythonRequest
	if err := a.decode(w, r, &req, false); err != nil {
		return err
	}
	if req.TimeoutMS < 0 {
		return badRequest("timeout_ms must not be negative")
	}
	for name, v := range req.Inputs {
		if !validObjectName(name) {
			return badRequest("inputs: %q is not a Python identifier", name)
		}
		if err := valueCheck("inputs."+name, &v); err != nil {
			return err
		}
	}
	if err := checkCaps(req.Caps); err != nil {
		return err
	}
	res, err := l.Session.PythonWith(r.Context(), req.Code, req.Inputs, session.PythonOptions{
		Timeout: time.Duration(req.TimeoutMS) * time.Millisecond, CacheReadOnly: req.CacheReadOnly, Caps: req.Caps})
	if err != nil {
		if strings.Contains(err.Error(), "session: input") {
			return fmt.Errorf("%w: %v", ErrNotRepresentable, err)
		}
		return err
	}
	return writeJSON(w, 200, res)
}

// DiffRequest asks for the workspace's changes.
type DiffRequest struct {
	Rebase bool `json:"rebase,omitempty"`
	// Origin diffs a branch against its origin, the baseline its parent had
	// at the fork, instead of its own (the fork point); not with rebase.
	Origin bool `json:"origin,omitempty"`
}

// DiffResponse is a session diff: paths relative to the workspace, contents
// base64 (JSON's []byte), modes as numbers (0o644 = 420).
type DiffResponse struct {
	Writes  map[string][]byte `json:"writes"`
	Links   map[string]string `json:"links"`
	Deletes []string          `json:"deletes"`
	Modes   map[string]uint32 `json:"modes"`
}

func (a *api) diff(w http.ResponseWriter, r *http.Request) error {
	l, err := a.live(r)
	if err != nil {
		return err
	}
	var req DiffRequest
	if err := a.decode(w, r, &req, true); err != nil {
		return err
	}
	var d *session.Diff
	switch {
	case req.Origin && req.Rebase:
		return badRequest("origin and rebase: a branch's origin is its parent's; only its own baseline moves")
	case req.Origin:
		d, err = l.Session.DiffOrigin(r.Context())
		if errors.Is(err, session.ErrNoOrigin) {
			return badRequest("%v", err)
		}
	default:
		d, err = l.Session.Diff(r.Context(), req.Rebase)
	}
	if err != nil {
		return err
	}
	out := DiffResponse{Writes: d.Writes, Links: d.Links, Deletes: d.Deletes, Modes: map[string]uint32{}}
	if out.Deletes == nil {
		out.Deletes = []string{}
	}
	for p, m := range d.Modes {
		out.Modes[p] = uint32(m.Perm() | m&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky))
	}
	return writeJSON(w, 200, out)
}

func (a *api) reset(w http.ResponseWriter, r *http.Request) error {
	l, err := a.live(r)
	if err != nil {
		return err
	}
	if err := a.decode(w, r, &struct{}{}, true); err != nil {
		return err
	}
	if err := l.Session.Reset(r.Context()); err != nil {
		return err
	}
	return writeJSON(w, 200, map[string]any{"reset": true})
}

// pushTree replaces the workspace with the tar stream in the body. The tree is
// spooled to a temp file and every entry checked first, so a refused tree
// never reaches the session.
func (a *api) pushTree(w http.ResponseWriter, r *http.Request) error {
	l, err := a.live(r)
	if err != nil {
		return err
	}
	if ct := r.Header.Get("Content-Type"); ct != "application/x-tar" {
		return &requestError{status: http.StatusUnsupportedMediaType, code: "unsupported_media_type", msg: fmt.Sprintf("Content-Type %q: want application/x-tar", ct)}
	}
	// The caller's tree, not in /tmp: other sandboxes see the host's /tmp.
	dir, err := dryexec.PrivateTemp(os.Getenv, "push-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	f, err := os.Create(filepath.Join(dir, "tree.tar"))
	if err != nil {
		return err
	}
	defer f.Close()
	if _, err := io.Copy(f, http.MaxBytesReader(w, r.Body, a.opt.MaxPush)); err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			return err
		}
		return badRequest("reading the tree: %v", err)
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	n, err := checkTar(f)
	if err != nil {
		return err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if err := l.Session.PushTar(r.Context(), f); err != nil {
		var re *wire.RemoteError
		if errors.As(err, &re) {
			return badRequest("the tree was refused: %v", re.Message)
		}
		return err
	}
	return writeJSON(w, 200, map[string]any{"entries": n})
}

// checkTar reads a whole tar stream and refuses entries that would land
// outside the workspace or that the guest does not take.
func checkTar(r io.Reader) (int, error) {
	tr := tar.NewReader(r)
	n := 0
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, badRequest("the tree is not a tar stream: %v", err)
		}
		if err := checkTreePath(fmt.Sprintf("tree entry %d", n+1), h.Name); err != nil {
			return n, err
		}
		switch h.Typeflag {
		case tar.TypeReg, tar.TypeDir, tar.TypeSymlink:
		case tar.TypeLink:
			if err := checkTreePath(fmt.Sprintf("tree entry %d (hard link target)", n+1), h.Linkname); err != nil {
				return n, err
			}
		default:
			return n, badRequest("tree entry %q: type %q (want files, directories and symlinks)", h.Name, h.Typeflag)
		}
		n++
	}
}

func (a *api) events(w http.ResponseWriter, r *http.Request) error {
	l, err := a.live(r)
	if err != nil {
		return err
	}
	all := l.Session.Emits()
	evs, err := after(r, all)
	if err != nil {
		return err
	}
	return writeJSON(w, 200, map[string]any{"events": evs, "next": len(all)})
}

// after is what of all comes after the ?after=N a client has already seen
// (never nil, so that it is a JSON list).
func after[T any](r *http.Request, all []T) ([]T, error) {
	n := 0
	if v := r.URL.Query().Get("after"); v != "" {
		var err error
		if n, err = strconv.Atoi(v); err != nil || n < 0 {
			return nil, badRequest("after=%q: want a count of events already seen", v)
		}
	}
	n = min(n, len(all))
	out := all[n:]
	if out == nil {
		out = []T{}
	}
	return out, nil
}

// network lists the session's network log (after=N skips N events), as
// events does its emits.
func (a *api) network(w http.ResponseWriter, r *http.Request) error {
	l, err := a.live(r)
	if err != nil {
		return err
	}
	all := l.Session.Network()
	evs, err := after(r, all)
	if err != nil {
		return err
	}
	return writeJSON(w, 200, map[string]any{"network": evs, "next": len(all)})
}

const maxCacheKey = 4096

func cacheKey(r *http.Request) (string, error) {
	k := r.PathValue("key")
	if k == "" || len(k) > maxCacheKey || strings.ContainsRune(k, 0) {
		return "", badRequest("cache key: want 1 to %d bytes without NUL", maxCacheKey)
	}
	return k, nil
}

func (a *api) cacheKeys(w http.ResponseWriter, r *http.Request) error {
	l, err := a.live(r)
	if err != nil {
		return err
	}
	keys := l.Session.Cache().Keys()
	if keys == nil {
		keys = []string{}
	}
	return writeJSON(w, 200, map[string]any{"keys": keys})
}

func (a *api) cacheGet(w http.ResponseWriter, r *http.Request) error {
	l, err := a.live(r)
	if err != nil {
		return err
	}
	k, err := cacheKey(r)
	if err != nil {
		return err
	}
	it, ok := l.Session.Cache().GetEntry(k)
	if !ok {
		return &requestError{status: http.StatusNotFound, code: "not_found", msg: fmt.Sprintf("cache key %q is not set", k)}
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	if it.Kind != "" {
		w.Header().Set(cacheKindHeader, it.Kind)
	}
	_, err = w.Write(it.Value)
	return err
}

func (a *api) cacheSet(w http.ResponseWriter, r *http.Request) error {
	l, err := a.live(r)
	if err != nil {
		return err
	}
	k, err := cacheKey(r)
	if err != nil {
		return err
	}
	kind, err := cacheKindOf(r)
	if err != nil {
		return err
	}
	v, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.opt.MaxBody))
	if err != nil {
		return err
	}
	if err := l.Session.Cache().SetEntry(k, session.CacheItem{Value: v, Kind: kind}); err != nil {
		return badRequest("%v", err)
	}
	return writeJSON(w, 200, map[string]any{"key": k, "size": len(v)})
}

func (a *api) cacheDel(w http.ResponseWriter, r *http.Request) error {
	l, err := a.live(r)
	if err != nil {
		return err
	}
	k, err := cacheKey(r)
	if err != nil {
		return err
	}
	l.Session.Cache().Delete(k)
	return writeJSON(w, 200, map[string]any{"key": k, "deleted": true})
}

// nextHostCall long-polls for the session's next host-object call: 200 with
// the call, or 204 if none came within the poll time.
func (a *api) nextHostCall(w http.ResponseWriter, r *http.Request) error {
	l, err := a.live(r)
	if err != nil {
		return err
	}
	wait := longPoll
	if v := r.URL.Query().Get("wait_ms"); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms < 0 || ms > 60_000 {
			return badRequest("wait_ms=%q: want 0 to 60000", v)
		}
		wait = time.Duration(ms) * time.Millisecond
	}
	ctx, cancel := contextWithTimeout(r, wait)
	defer cancel()
	c := l.calls.next(ctx)
	if c == nil {
		w.WriteHeader(http.StatusNoContent)
		return nil
	}
	return writeJSON(w, 200, c)
}

func (a *api) answerHostCall(w http.ResponseWriter, r *http.Request) error {
	l, err := a.live(r)
	if err != nil {
		return err
	}
	var ans HostAnswer
	if err := a.decode(w, r, &ans, false); err != nil {
		return err
	}
	if (ans.Value == nil) == (ans.Error == nil) {
		return badRequest("want exactly one of value and error")
	}
	if ans.Value != nil {
		if err := valueCheck("value", ans.Value); err != nil {
			return err
		}
	}
	if !l.calls.answer(r.PathValue("call"), ans) {
		return &requestError{status: http.StatusNotFound, code: "not_found", msg: fmt.Sprintf("no host call %q is waiting for an answer", r.PathValue("call"))}
	}
	return writeJSON(w, 200, map[string]any{"answered": true})
}

func contextWithTimeout(r *http.Request, d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(r.Context(), d)
}
