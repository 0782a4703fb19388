// Package openapi serves OpenAPI 3 documents as netsim mocks: a named example
// first, else a response generated from the schema (deterministic for a
// seed), requests validated against the operation. It is apart from package
// mock, and reaches netsim only as a mock.LoadAPI its caller passes
// (netsim.Config.OpenAPI), because its dependencies (kin-openapi and the
// JSON Schema compiler under it, which compiles its meta-schemas in its init)
// cost milliseconds at every start of every program that links them: only the
// programs that serve mocks (dryexec-netsim, tests) link it.
package openapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/dryexec/dryexec/netsim/mock"
)

type api struct {
	name     string
	doc      *openapi3.T
	hosts    []string
	basePath string
	validate bool
	ops      []op
}

type op struct {
	method   string
	key      string // the document's path key, e.g. /pets/{petId}
	pat      mock.Pattern
	item     *openapi3.PathItem
	op       *openapi3.Operation
	id       string
	concrete bool
}

// Load loads the OpenAPI document a names (relative to baseDir) as a mock:
// a mock.LoadAPI, for mock.Compile and netsim.Config.OpenAPI.
func Load(ctx context.Context, a mock.API, baseDir string) (mock.APIServer, error) {
	if a.Spec == "" {
		return nil, errors.New("spec: a path to an OpenAPI document is required")
	}
	p := a.Spec
	if !filepath.IsAbs(p) {
		p = filepath.Join(baseDir, p)
	}
	loader := openapi3.NewLoader()
	loader.Context = ctx
	// Never fetch anything: a mock file must not make the host reach out.
	loader.IsExternalRefsAllowed = false
	doc, err := loader.LoadFromFile(p)
	if err != nil {
		return nil, fmt.Errorf("loading %s: %v", p, err)
	}
	if err := doc.Validate(ctx); err != nil {
		return nil, fmt.Errorf("%s is not a valid OpenAPI document: %v", p, err)
	}
	ap := &api{name: filepath.Base(p), doc: doc, basePath: a.BasePath, validate: !a.NoValidate}
	if a.Host != "" {
		ap.hosts = []string{a.Host}
	}
	for _, s := range doc.Servers {
		u, err := url.Parse(s.URL)
		if err != nil {
			continue
		}
		if a.Host == "" && u.Hostname() != "" && !slices.Contains(ap.hosts, u.Hostname()) {
			ap.hosts = append(ap.hosts, u.Hostname())
		}
		if a.BasePath == "" && ap.basePath == "" {
			ap.basePath = strings.TrimSuffix(u.Path, "/")
		}
	}
	if len(ap.hosts) == 0 {
		return nil, fmt.Errorf("%s: no host: set host, or give the document a servers[].url with one", p)
	}
	ap.basePath = strings.TrimSuffix(ap.basePath, "/")
	keys := make([]string, 0, doc.Paths.Len())
	for k := range doc.Paths.Map() {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		item := doc.Paths.Value(k)
		pat, err := mock.CompilePattern(k)
		if err != nil {
			return nil, fmt.Errorf("%s: %v", p, err)
		}
		methods := make([]string, 0, 8)
		for m := range item.Operations() {
			methods = append(methods, m)
		}
		sort.Strings(methods)
		for _, m := range methods {
			o := item.Operations()[m]
			id := o.OperationID
			if id == "" {
				id = m + " " + k
			}
			ap.ops = append(ap.ops, op{method: m, key: k, pat: pat, item: item, op: o, id: id, concrete: pat.Params() == 0})
		}
	}
	// Concrete paths win over templates, as OpenAPI requires (/pets/mine
	// before /pets/{id}).
	sort.SliceStable(ap.ops, func(i, j int) bool { return ap.ops[i].concrete && !ap.ops[j].concrete })
	return ap, nil
}

// MatchHost reports whether the document serves host.
func (a *api) MatchHost(host string) bool {
	for _, h := range a.hosts {
		if mock.MatchHost(h, host) {
			return true
		}
	}
	return false
}

// errBody is the JSON body of an error answer.
type errBody struct {
	Error  string `json:"error"`
	Detail string `json:"detail,omitempty"`
}

func jsonResponse(status int, v any) mock.Response {
	b, _ := json.Marshal(v)
	h := http.Header{}
	h.Set("Content-Type", "application/json")
	return mock.Response{Status: status, Header: h, Body: b}
}

// Serve answers req from the document's operations.
func (a *api) Serve(ctx context.Context, req *mock.Request, seed uint64) mock.Result {
	path := req.Path
	if a.basePath != "" {
		if path != a.basePath && !strings.HasPrefix(path, a.basePath+"/") {
			return mock.Result{SchemaBreach: true, Reason: fmt.Sprintf("%s: %s is outside the API's base path %s", a.name, path, a.basePath)}
		}
		path = strings.TrimPrefix(path, a.basePath)
		if path == "" {
			path = "/"
		}
	}
	method := strings.ToUpper(req.Method)
	var pathSeen bool
	for _, o := range a.ops {
		params, ok := o.pat.Match(path)
		if !ok {
			continue
		}
		pathSeen = true
		if o.method != method {
			continue
		}
		if a.validate {
			if err := a.check(ctx, o, req, params); err != nil {
				return mock.Result{
					Matched: true, SchemaBreach: true,
					Response: jsonResponse(http.StatusBadRequest, errBody{Error: "request does not match operation " + o.id, Detail: err.Error()}),
					Reason:   fmt.Sprintf("%s %s: %v", a.name, o.id, oneLine(err)),
				}
			}
		}
		resp, err := a.respond(o, req, params, seed)
		if err != nil {
			return mock.Result{Matched: true, Response: jsonResponse(http.StatusInternalServerError, errBody{Error: err.Error()}),
				Reason: fmt.Sprintf("%s %s: %v", a.name, o.id, err)}
		}
		return mock.Result{Matched: true, Response: resp, Reason: fmt.Sprintf("%s %s", a.name, o.id)}
	}
	if pathSeen {
		return mock.Result{Matched: true, SchemaBreach: true,
			Response: jsonResponse(http.StatusMethodNotAllowed, errBody{Error: fmt.Sprintf("%s is not an operation of %s", method, path)}),
			Reason:   fmt.Sprintf("%s: no %s operation on %s", a.name, method, path)}
	}
	return mock.Result{SchemaBreach: true, Reason: fmt.Sprintf("%s: no operation for %s %s", a.name, method, req.Path)}
}

func oneLine(err error) string {
	s := strings.Join(strings.Fields(err.Error()), " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

func (a *api) check(ctx context.Context, o op, req *mock.Request, params map[string]string) error {
	u := &url.URL{Scheme: "http", Host: req.Host, Path: req.Path, RawQuery: req.RawQuery}
	hr, err := http.NewRequestWithContext(ctx, o.method, u.String(), bytes.NewReader(req.Body))
	if err != nil {
		return err
	}
	hr.Header = req.Header.Clone()
	if hr.Header == nil {
		hr.Header = http.Header{}
	}
	in := &openapi3filter.RequestValidationInput{
		Request:    hr,
		PathParams: params,
		Route:      &routers.Route{Spec: a.doc, Path: o.key, PathItem: o.item, Method: o.method, Operation: o.op},
		Options: &openapi3filter.Options{
			// Credentials are not the mock's business (and are redacted).
			AuthenticationFunc: openapi3filter.NoopAuthenticationFunc,
		},
	}
	if err := openapi3filter.ValidateRequest(ctx, in); err != nil {
		return err
	}
	return checkRequestFormats(o, req, params)
}

// pickResponse chooses the success answer of an operation: 200, 201, the
// lowest other 2xx, then default.
func pickResponse(o *openapi3.Operation) (int, *openapi3.Response) {
	if o.Responses == nil {
		return http.StatusOK, nil
	}
	m := o.Responses.Map()
	codes := make([]string, 0, len(m))
	for c := range m {
		codes = append(codes, c)
	}
	sort.Strings(codes)
	for _, want := range append([]string{"200", "201"}, codes...) {
		if r, ok := m[want]; ok && len(want) == 3 && want[0] == '2' && r.Value != nil {
			n, _ := strconv.Atoi(want)
			return n, r.Value
		}
	}
	if d := o.Responses.Default(); d != nil && d.Value != nil {
		return http.StatusOK, d.Value
	}
	if r := o.Responses.Value("2XX"); r != nil && r.Value != nil {
		return http.StatusOK, r.Value
	}
	return http.StatusOK, nil
}

func (a *api) respond(o op, req *mock.Request, params map[string]string, seed uint64) (mock.Response, error) {
	status, r := pickResponse(o.op)
	h := http.Header{}
	if r == nil || len(r.Content) == 0 {
		return mock.Response{Status: status, Header: h}, nil
	}
	ctype := "application/json"
	mt := r.Content.Get(ctype)
	if mt == nil {
		types := make([]string, 0, len(r.Content))
		for t := range r.Content {
			types = append(types, t)
		}
		sort.Strings(types)
		ctype = types[0]
		mt = r.Content[ctype]
	}
	h.Set("Content-Type", ctype)
	v, ok := example(mt)
	if !ok {
		if mt.Schema == nil || mt.Schema.Value == nil {
			return mock.Response{Status: status, Header: h}, nil
		}
		hs := fnv.New64a()
		fmt.Fprintf(hs, "%s %s?%s", o.method, req.Path, req.RawQuery)
		g := &generator{rng: rand.New(rand.NewPCG(seed, hs.Sum64()))}
		v = g.value(mt.Schema.Value, 0)
		if m, isObj := v.(map[string]any); isObj {
			echoParams(m, mt.Schema.Value, params)
		}
	}
	if s, isStr := v.(string); isStr && !strings.Contains(ctype, "json") {
		return mock.Response{Status: status, Header: h, Body: []byte(s)}, nil
	}
	b, err := json.Marshal(v)
	if err != nil {
		return mock.Response{}, fmt.Errorf("encoding example: %v", err)
	}
	return mock.Response{Status: status, Header: h, Body: b}, nil
}

// example returns a named example (first by name), else the media type's
// example, else the schema's.
func example(mt *openapi3.MediaType) (any, bool) {
	if len(mt.Examples) > 0 {
		names := make([]string, 0, len(mt.Examples))
		for n := range mt.Examples {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			if e := mt.Examples[n]; e != nil && e.Value != nil && e.Value.Value != nil {
				return e.Value.Value, true
			}
		}
	}
	if mt.Example != nil {
		return mt.Example, true
	}
	if mt.Schema != nil && mt.Schema.Value != nil && mt.Schema.Value.Example != nil {
		return mt.Schema.Value.Example, true
	}
	return nil, false
}

// echoParams puts path parameters into the top-level properties of the same
// name, so GET /users/42 answers {"id": 42, …}: mocks read more like the API.
func echoParams(m map[string]any, s *openapi3.Schema, params map[string]string) {
	for _, r := range s.AllOf {
		if r.Value != nil {
			echoParams(m, r.Value, params)
		}
	}
	for name, val := range params {
		ref, ok := s.Properties[name]
		if !ok || ref.Value == nil {
			continue
		}
		switch {
		case ref.Value.Type.Is("integer"):
			if n, err := strconv.ParseInt(val, 10, 64); err == nil && ref.Value.VisitJSON(float64(n)) == nil {
				m[name] = n
			}
		case ref.Value.Type.Is("string"):
			if ref.Value.VisitJSON(val) == nil && checkFormat(ref.Value.Format, val) == nil {
				m[name] = val
			}
		}
	}
}
