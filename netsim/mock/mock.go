// Package mock owns netsim's canned answers: static routes (host, method,
// path → status, headers, body or file, delay) and OpenAPI 3 documents served
// as schema-driven mocks, which package netsim/mock/openapi loads (a LoadAPI
// passed to Compile: only the programs that serve them link kin-openapi). It
// knows nothing about sockets: netsim hands it a Request and writes the
// Response it returns.
package mock

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// ErrBadSpec is wrapped by every error about a mock file's content.
var ErrBadSpec = errors.New("bad mock spec")

// ErrNoOpenAPI is wrapped (with ErrBadSpec) by Compile's error for a spec
// naming OpenAPI documents when it was given no LoadAPI: the program does not
// link the OpenAPI mocks (package netsim/mock/openapi), whose dependencies
// (kin-openapi, a JSON Schema compiler) cost every program linking them
// milliseconds of initialisation at each start.
var ErrNoOpenAPI = errors.New("OpenAPI mocks are not linked into this program")

// APIServer is one OpenAPI document served as a mock (made by a LoadAPI).
type APIServer interface {
	// MatchHost reports whether the document serves host.
	MatchHost(host string) bool
	// Serve answers req, deterministically for seed. A request the
	// document has no operation for, or an invalid one, gives SchemaBreach.
	Serve(ctx context.Context, req *Request, seed uint64) Result
}

// LoadAPI loads one OpenAPI entry of a Spec (its Spec path relative to
// baseDir). Package netsim/mock/openapi's Load is the one there is; it is a
// parameter so that only the programs serving OpenAPI mocks link it.
type LoadAPI func(ctx context.Context, a API, baseDir string) (APIServer, error)

// maxBodyFile bounds a route's body file: mocks are loaded into memory.
const maxBodyFile = 16 << 20

// Spec is the mock part of a netsim file (YAML or JSON).
type Spec struct {
	// Block is the response to a request nothing matched (default 403 with a
	// JSON error naming the reason).
	Block *Static `yaml:"block" json:"block"`
	// Routes are tried in order; the first match answers.
	Routes []Route `yaml:"routes" json:"routes"`
	// OpenAPI documents are tried after the routes.
	OpenAPI []API `yaml:"openapi" json:"openapi"`
}

// Static is a fixed response.
type Static struct {
	Status  int               `yaml:"status" json:"status"`
	Headers map[string]string `yaml:"headers" json:"headers"`
	// At most one of Body, JSON and File.
	Body string `yaml:"body" json:"body"`
	JSON any    `yaml:"json" json:"json"`
	// File is read once at load time; a relative path is relative to the
	// mock file's directory.
	File string `yaml:"file" json:"file"`
	// Delay is a Go duration ("150ms") waited before answering.
	Delay string `yaml:"delay" json:"delay"`
}

// Route is one static mock.
type Route struct {
	// Host: exact name or address, "*.example.com", or empty for any host.
	Host string `yaml:"host" json:"host"`
	// Port: 0 for any.
	Port int `yaml:"port" json:"port"`
	// Method: empty for any.
	Method string `yaml:"method" json:"method"`
	// Path: "/exact", "/prefix/*" or "/users/{id}"; empty for any.
	Path   string `yaml:"path" json:"path"`
	Static `yaml:",inline" json:",inline"`
}

// API serves an OpenAPI 3 document.
type API struct {
	// Spec is the document's path (YAML or JSON), relative to the mock file.
	Spec string `yaml:"spec" json:"spec"`
	// Host serves the document; default: the hosts of its servers[].url.
	Host string `yaml:"host" json:"host"`
	// BasePath is stripped before matching; default: the path of its first
	// server URL.
	BasePath string `yaml:"base_path" json:"base_path"`
	// NoValidate skips request validation.
	NoValidate bool `yaml:"no_validate" json:"no_validate"`
}

// Request is what netsim saw.
type Request struct {
	Host     string
	Port     int
	Method   string
	Path     string
	RawQuery string
	Header   http.Header
	Body     []byte
}

// Response is what to send back.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
	Delay  time.Duration
}

// Result is the outcome of Match.
type Result struct {
	// Matched: Response is the answer.
	Matched  bool
	Response Response
	// SchemaBreach: the request did not match the API it was sent to (an
	// invalid request, or no such operation). When Matched is false it still
	// tells netsim the request hit an OpenAPI host.
	SchemaBreach bool
	// Reason says which route or operation answered, or why none did.
	Reason string
}

// Set is a compiled Spec. Safe for concurrent use.
type Set struct {
	block  *Response
	routes []route
	apis   []APIServer
	seed   uint64
}

type route struct {
	host, method string
	port         int
	path         Pattern
	resp         Response
	index        int
}

// Compile checks spec, reads the files it names (relative to baseDir) and
// loads its OpenAPI documents with loadAPI (nil: a spec naming any is
// refused with ErrNoOpenAPI). seed makes generated responses repeatable.
func Compile(ctx context.Context, spec Spec, baseDir string, seed uint64, loadAPI LoadAPI) (*Set, error) {
	s := &Set{seed: seed}
	if spec.Block != nil {
		r, err := compileStatic(*spec.Block, baseDir, http.StatusForbidden)
		if err != nil {
			return nil, fmt.Errorf("%w: block: %v", ErrBadSpec, err)
		}
		s.block = &r
	}
	for i, rt := range spec.Routes {
		p, err := CompilePattern(rt.Path)
		if err != nil {
			return nil, fmt.Errorf("%w: routes[%d]: %v", ErrBadSpec, i, err)
		}
		if rt.Port < 0 || rt.Port > 65535 {
			return nil, fmt.Errorf("%w: routes[%d]: port %d out of range", ErrBadSpec, i, rt.Port)
		}
		r, err := compileStatic(rt.Static, baseDir, http.StatusOK)
		if err != nil {
			return nil, fmt.Errorf("%w: routes[%d]: %v", ErrBadSpec, i, err)
		}
		s.routes = append(s.routes, route{
			host: rt.Host, method: strings.ToUpper(rt.Method), port: rt.Port,
			path: p, resp: r, index: i,
		})
	}
	for i, a := range spec.OpenAPI {
		if loadAPI == nil {
			return nil, fmt.Errorf("%w: openapi[%d]: %w", ErrBadSpec, i, ErrNoOpenAPI)
		}
		ap, err := loadAPI(ctx, a, baseDir)
		if err != nil {
			return nil, fmt.Errorf("%w: openapi[%d]: %v", ErrBadSpec, i, err)
		}
		s.apis = append(s.apis, ap)
	}
	return s, nil
}

func compileStatic(st Static, baseDir string, defStatus int) (Response, error) {
	r := Response{Status: st.Status, Header: http.Header{}}
	if r.Status == 0 {
		r.Status = defStatus
	}
	if r.Status < 100 || r.Status > 999 {
		return r, fmt.Errorf("status %d out of range", r.Status)
	}
	n := 0
	for _, set := range []bool{st.Body != "", st.JSON != nil, st.File != ""} {
		if set {
			n++
		}
	}
	if n > 1 {
		return r, errors.New("give one of body, json and file")
	}
	ctype := ""
	switch {
	case st.Body != "":
		r.Body = []byte(st.Body)
		ctype = "text/plain; charset=utf-8"
	case st.JSON != nil:
		b, err := json.Marshal(st.JSON)
		if err != nil {
			return r, fmt.Errorf("json: %v", err)
		}
		r.Body = b
		ctype = "application/json"
	case st.File != "":
		p := st.File
		if !filepath.IsAbs(p) {
			p = filepath.Join(baseDir, p)
		}
		fi, err := os.Stat(p)
		if err != nil {
			return r, fmt.Errorf("file: %v", err)
		}
		if fi.Size() > maxBodyFile {
			return r, fmt.Errorf("file %s: larger than %d bytes", p, maxBodyFile)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return r, fmt.Errorf("file: %v", err)
		}
		r.Body = b
		ctype = mime.TypeByExtension(filepath.Ext(p))
		if ctype == "" {
			ctype = http.DetectContentType(b)
		}
	}
	for k, v := range st.Headers {
		r.Header.Set(k, v)
	}
	if r.Header.Get("Content-Type") == "" && ctype != "" {
		r.Header.Set("Content-Type", ctype)
	}
	if st.Delay != "" {
		d, err := time.ParseDuration(st.Delay)
		if err != nil || d < 0 {
			return r, fmt.Errorf("delay %q: want a duration such as 150ms", st.Delay)
		}
		r.Delay = d
	}
	return r, nil
}

// Block returns the configured response for unmatched requests, or nil.
func (s *Set) Block() *Response {
	if s == nil || s.block == nil {
		return nil
	}
	r := *s.block
	r.Header = s.block.Header.Clone()
	return &r
}

// Match finds the answer to req: routes in file order, then OpenAPI documents.
func (s *Set) Match(ctx context.Context, req *Request) Result {
	if s == nil {
		return Result{}
	}
	method := strings.ToUpper(req.Method)
	for _, r := range s.routes {
		if !MatchHost(r.host, req.Host) || (r.port != 0 && r.port != req.Port) ||
			(r.method != "" && r.method != method) {
			continue
		}
		if _, ok := r.path.Match(req.Path); !ok {
			continue
		}
		resp := r.resp
		resp.Header = r.resp.Header.Clone()
		return Result{Matched: true, Response: resp, Reason: fmt.Sprintf("route %d (%s %s)", r.index, orAny(r.method), r.path.raw)}
	}
	var miss *Result
	for _, a := range s.apis {
		if !a.MatchHost(req.Host) {
			continue
		}
		res := a.Serve(ctx, req, s.seed)
		if res.Matched {
			return res
		}
		if miss == nil {
			miss = &res
		}
	}
	if miss != nil {
		return *miss
	}
	return Result{}
}

func orAny(m string) string {
	if m == "" {
		return "*"
	}
	return m
}
