package mock

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestRoutes: static routes by host, port, method and exact, prefix and
// template paths, in file order.
func TestRoutes(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "user.json"), []byte(`{"file":true}`), 0o644)
	spec := Spec{Routes: []Route{
		{Host: "api.x", Method: "GET", Path: "/users/{id}", Static: Static{File: "user.json"}},
		{Host: "*.x", Path: "/static/*", Static: Static{Status: 200, Body: "static", Delay: "10ms"}},
		{Host: "api.x", Port: 8443, Path: "/port", Static: Static{Status: 201, JSON: map[string]any{"port": 8443}}},
		{Path: "/exact", Static: Static{Status: 418, Body: "teapot", Headers: map[string]string{"X-A": "b"}}},
	}}
	set, err := Compile(context.Background(), spec, dir, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		host, method, path string
		port, status       int
		body, ctype        string
	}{
		{"api.x", "GET", "/users/9", 443, 200, `{"file":true}`, "application/json"},
		{"api.x", "POST", "/users/9", 443, 0, "", ""},
		{"api.x", "GET", "/users/9/more", 443, 0, "", ""},
		{"cdn.x", "GET", "/static/a/b.css", 443, 200, "static", "text/plain; charset=utf-8"},
		{"x", "GET", "/static/a", 443, 0, "", ""},
		{"API.X.", "GET", "/port", 8443, 201, `{"port":8443}`, "application/json"},
		{"api.x", "GET", "/port", 443, 0, "", ""},
		{"anything", "PUT", "/exact", 80, 418, "teapot", "text/plain; charset=utf-8"},
		{"anything", "PUT", "/exact/", 80, 0, "", ""},
	}
	for _, tc := range cases {
		res := set.Match(context.Background(), &Request{Host: tc.host, Port: tc.port, Method: tc.method, Path: tc.path})
		if tc.status == 0 {
			if res.Matched {
				t.Errorf("%s %s %s matched %+v", tc.method, tc.host, tc.path, res)
			}
			continue
		}
		if !res.Matched || res.Response.Status != tc.status || string(res.Response.Body) != tc.body || res.Response.Header.Get("Content-Type") != tc.ctype {
			t.Errorf("%s %s %s: %+v %s", tc.method, tc.host, tc.path, res, res.Response.Body)
		}
	}
	if r := set.Match(context.Background(), &Request{Host: "cdn.x", Method: "GET", Path: "/static/x"}); r.Response.Delay != 10*time.Millisecond {
		t.Errorf("delay %v", r.Response.Delay)
	}
}

// TestCompileErrors: bad specs are refused with ErrBadSpec and a message
// naming the entry.
func TestCompileErrors(t *testing.T) {
	cases := []struct {
		name string
		spec Spec
	}{
		{"relative path", Spec{Routes: []Route{{Path: "users"}}}},
		{"star inside", Spec{Routes: []Route{{Path: "/a/*/b"}}}},
		{"partial param", Spec{Routes: []Route{{Path: "/a/x{id}"}}}},
		{"two bodies", Spec{Routes: []Route{{Static: Static{Body: "a", JSON: 1}}}}},
		{"missing file", Spec{Routes: []Route{{Static: Static{File: "nope.json"}}}}},
		{"bad delay", Spec{Routes: []Route{{Static: Static{Delay: "soon"}}}}},
		{"bad status", Spec{Routes: []Route{{Static: Static{Status: 7}}}}},
		{"bad port", Spec{Routes: []Route{{Port: 70000}}}},
	}
	for _, tc := range cases {
		_, err := Compile(context.Background(), tc.spec, t.TempDir(), 0, nil)
		if !errors.Is(err, ErrBadSpec) {
			t.Errorf("%s: err %v", tc.name, err)
		}
	}
}

// TestGeneratorRespectsSchemas: values generated for tricky schemas are

// TestNoOpenAPI: without a LoadAPI, a spec naming an OpenAPI document is
// refused with ErrNoOpenAPI (and ErrBadSpec); a loader is called with the
// entry and the spec's directory.
func TestNoOpenAPI(t *testing.T) {
	spec := Spec{OpenAPI: []API{{Spec: "petstore.yaml"}}}
	_, err := Compile(context.Background(), spec, "testdata", 0, nil)
	if !errors.Is(err, ErrNoOpenAPI) || !errors.Is(err, ErrBadSpec) {
		t.Fatalf("err %v", err)
	}
	var got []string
	load := func(_ context.Context, a API, dir string) (APIServer, error) {
		got = append(got, a.Spec, dir)
		return nil, errors.New("refused")
	}
	if _, err := Compile(context.Background(), spec, "testdata", 0, load); !errors.Is(err, ErrBadSpec) || len(got) != 2 || got[0] != "petstore.yaml" || got[1] != "testdata" {
		t.Fatalf("err %v, loader got %q", err, got)
	}
}
