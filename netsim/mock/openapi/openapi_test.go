package openapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/dryexec/dryexec/netsim/mock"
)

// petstore is the test document compiled as a mock.Set would serve it,
// and the api Load made of it.
func petstore(t *testing.T, seed uint64) (*mock.Set, *api) {
	t.Helper()
	var loaded *api
	load := func(ctx context.Context, a mock.API, baseDir string) (mock.APIServer, error) {
		s, err := Load(ctx, a, baseDir)
		loaded, _ = s.(*api)
		return s, err
	}
	s, err := mock.Compile(context.Background(), mock.Spec{OpenAPI: []mock.API{{Spec: "petstore.yaml"}}}, "../testdata", seed, load)
	if err != nil {
		t.Fatal(err)
	}
	return s, loaded
}

func petstoreSet(t *testing.T, seed uint64) *mock.Set {
	s, _ := petstore(t, seed)
	return s
}

// TestLoadErrors: a missing document and an entry without one are refused
// with mock.ErrBadSpec.
func TestLoadErrors(t *testing.T) {
	for name, a := range map[string]mock.API{"missing openapi": {Spec: "nope.yaml"}, "openapi without spec": {Host: "x"}} {
		_, err := mock.Compile(context.Background(), mock.Spec{OpenAPI: []mock.API{a}}, t.TempDir(), 0, Load)
		if !errors.Is(err, mock.ErrBadSpec) || errors.Is(err, mock.ErrNoOpenAPI) {
			t.Errorf("%s: err %v", name, err)
		}
	}
}

func jsonHeader() http.Header { return http.Header{"Content-Type": {"application/json"}} }

// TestOpenAPIOperations: every operation answers, and every generated answer
// is valid for the operation's response schema (checked by kin-openapi's
// own response validator, independent of the generator).
func TestOpenAPIOperations(t *testing.T) {
	set, ap := petstore(t, 42)
	cases := []struct {
		method, path, query, body string
		status                    int
	}{
		{"GET", "/v1/pets", "limit=5&tag=cat", "", 200},
		{"POST", "/v1/pets", "", `{"name":"rex","tag":"dog"}`, 201},
		{"GET", "/v1/pets/mine", "", "", 200},
		{"GET", "/v1/pets/17", "", "", 200},
		{"PUT", "/v1/pets/17", "", `{"name":"rex"}`, 200},
		{"DELETE", "/v1/pets/17", "", "", 204},
		{"GET", "/v1/owners/0b0e8a3c-4e6f-4c1a-9a57-3f0c2e1d9b11/pets", "", "", 200},
	}
	doc := ap.doc
	for _, tc := range cases {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			req := &mock.Request{Host: "pets.example.com", Port: 443, Method: tc.method, Path: tc.path, RawQuery: tc.query, Header: jsonHeader(), Body: []byte(tc.body)}
			res := set.Match(context.Background(), req)
			if !res.Matched || res.SchemaBreach || res.Response.Status != tc.status {
				t.Fatalf("result %+v body %s", res, res.Response.Body)
			}
			// Validate the answer against the document.
			var o op
			var params map[string]string
			for _, cand := range ap.ops {
				if p, ok := cand.pat.Match(tc.path[len("/v1"):]); ok && cand.method == tc.method {
					o, params = cand, p
					break
				}
			}
			hr, _ := http.NewRequest(tc.method, (&url.URL{Scheme: "https", Host: "pets.example.com", Path: tc.path, RawQuery: tc.query}).String(), bytes.NewReader([]byte(tc.body)))
			hr.Header = jsonHeader()
			in := &openapi3filter.ResponseValidationInput{
				RequestValidationInput: &openapi3filter.RequestValidationInput{Request: hr, PathParams: params,
					Route: &routers.Route{Spec: doc, Path: o.key, PathItem: o.item, Method: o.method, Operation: o.op}},
				Status:  res.Response.Status,
				Header:  res.Response.Header,
				Body:    ioNop(res.Response.Body),
				Options: &openapi3filter.Options{IncludeResponseStatus: true},
			}
			if err := openapi3filter.ValidateResponse(context.Background(), in); err != nil {
				t.Fatalf("generated response invalid: %v\n%s", err, res.Response.Body)
			}
		})
	}
}

func ioNop(b []byte) *nopCloser { return &nopCloser{bytes.NewReader(b)} }

type nopCloser struct{ *bytes.Reader }

func (nopCloser) Close() error { return nil }

// TestOpenAPIEchoesPathParams: a path parameter fills the top-level property
// of the same name (GET /owners/{ownerId}/pets answers that ownerId).
func TestOpenAPIEchoesPathParams(t *testing.T) {
	const id = "0b0e8a3c-4e6f-4c1a-9a57-3f0c2e1d9b11"
	res := petstoreSet(t, 1).Match(context.Background(), &mock.Request{Host: "pets.example.com", Method: "GET", Path: "/v1/owners/" + id + "/pets"})
	var got map[string]any
	if err := json.Unmarshal(res.Response.Body, &got); err != nil || got["ownerId"] != id {
		t.Fatalf("answer %v (%v)", got, err)
	}
}

// TestOpenAPINamedExampleFirst: named examples win (first by name), and a
// concrete path wins over a template (/pets/mine is not /pets/{petId}).
func TestOpenAPINamedExampleFirst(t *testing.T) {
	res := petstoreSet(t, 1).Match(context.Background(), &mock.Request{Host: "pets.example.com", Method: "GET", Path: "/v1/pets/mine"})
	if string(res.Response.Body) != `{"owner":"first"}` {
		t.Fatalf("body %s", res.Response.Body)
	}
}

// TestOpenAPIDeterministic: the same seed and request give the same bytes;
// another seed gives others.
func TestOpenAPIDeterministic(t *testing.T) {
	req := &mock.Request{Host: "pets.example.com", Method: "GET", Path: "/v1/pets", RawQuery: "limit=2"}
	a := petstoreSet(t, 7).Match(context.Background(), req).Response.Body
	b := petstoreSet(t, 7).Match(context.Background(), req).Response.Body
	c := petstoreSet(t, 8).Match(context.Background(), req).Response.Body
	if !bytes.Equal(a, b) {
		t.Fatalf("same seed, different bytes:\n%s\n%s", a, b)
	}
	if bytes.Equal(a, c) {
		t.Fatalf("different seeds, same bytes: %s", a)
	}
}

// TestOpenAPIBreaches: requests that do not fit the API are flagged.
func TestOpenAPIBreaches(t *testing.T) {
	set := petstoreSet(t, 1)
	cases := []struct {
		name, method, path, query, body string
		matched                         bool
		status                          int
	}{
		{"body missing required field", "POST", "/v1/pets", "", `{"tag":"dog"}`, true, 400},
		{"body wrong type", "POST", "/v1/pets", "", `{"name":5}`, true, 400},
		{"enum violated", "POST", "/v1/pets", "", `{"name":"x","tag":"horse"}`, true, 400},
		{"no body", "POST", "/v1/pets", "", ``, true, 400},
		{"query out of range", "GET", "/v1/pets", "limit=500", "", true, 400},
		{"path param not an integer", "GET", "/v1/pets/abc", "", "", true, 400},
		{"path param not a uuid", "GET", "/v1/owners/nope/pets", "", "", true, 400},
		{"method not in the API", "PATCH", "/v1/pets/1", "", "", true, 405},
		{"path not in the API", "GET", "/v1/unicorns", "", "", false, 0},
		{"outside the base path", "GET", "/v2/pets", "", "", false, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := set.Match(context.Background(), &mock.Request{Host: "pets.example.com", Method: tc.method, Path: tc.path, RawQuery: tc.query, Header: jsonHeader(), Body: []byte(tc.body)})
			if !res.SchemaBreach || res.Matched != tc.matched || (tc.matched && res.Response.Status != tc.status) {
				t.Fatalf("result %+v body %s", res, res.Response.Body)
			}
		})
	}
}

// TestRoutes: static routes by host, port, method and exact, prefix and
// template paths, in file order.
// valid for them.
func TestGeneratorRespectsSchemas(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	u := func(v uint64) *uint64 { return &v }
	yes := true
	schemas := map[string]*openapi3.Schema{
		"exclusive int":  {Type: &openapi3.Types{"integer"}, Min: f(3), Max: f(5), ExclusiveMin: openapi3.ExclusiveBound{Bool: &yes}, ExclusiveMax: openapi3.ExclusiveBound{Bool: &yes}},
		"multiple of":    {Type: &openapi3.Types{"integer"}, Min: f(10), Max: f(100), MultipleOf: f(7)},
		"number range":   {Type: &openapi3.Types{"number"}, Min: f(0.5), Max: f(0.6)},
		"short string":   {Type: &openapi3.Types{"string"}, MinLength: 2, MaxLength: u(3)},
		"long string":    {Type: &openapi3.Types{"string"}, MinLength: 30},
		"formats ipv4":   {Type: &openapi3.Types{"string"}, Format: "ipv4"},
		"formats date":   {Type: &openapi3.Types{"string"}, Format: "date"},
		"array bounds":   {Type: &openapi3.Types{"array"}, MinItems: 4, MaxItems: u(4), Items: openapi3.NewSchemaRef("", openapi3.NewBoolSchema())},
		"nullable types": {Type: &openapi3.Types{"null", "string"}},
	}
	for name, s := range schemas {
		for seed := uint64(0); seed < 20; seed++ {
			g := &generator{rng: newRand(seed)}
			v := g.value(s, 0)
			if err := s.VisitJSON(toJSON(v)); err != nil {
				t.Errorf("%s seed %d: %v invalid: %v", name, seed, v, err)
			}
		}
	}
}

func toJSON(v any) any {
	b, _ := json.Marshal(v)
	var out any
	json.Unmarshal(b, &out)
	return out
}
