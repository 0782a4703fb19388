package network

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/server"
)

// TestSessionNetAPI: the HTTP API's sessions take net and report it: a
// session opened with a mock file answers curl and urllib from the mocks,
// each exec's result carries its network entries, GET …/network lists the
// session's log, and a bad spec is the client's error.
func TestSessionNetAPI(t *testing.T) {
	requireTUN(t)
	svc, err := server.NewService(server.Config{StoreDir: filepath.Join(t.TempDir(), "home"),
		Getenv: func(k string) string { return testPath[k] }})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { svc.Close() })
	h := server.Handler(svc, server.HandlerOptions{})
	call := func(method, path string, body any, want int) map[string]any {
		t.Helper()
		b, _ := json.Marshal(body)
		req := httptest.NewRequestWithContext(t.Context(), method, path, bytes.NewReader(b))
		req.Header.Set("Content-Type", "application/json")
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != want {
			t.Fatalf("%s %s: %d %s, want %d", method, path, w.Code, w.Body, want)
		}
		var out map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &out); err != nil {
			t.Fatalf("%s %s: %v", method, path, err)
		}
		return out
	}
	mock := filepath.Join(t.TempDir(), "mock.yaml")
	if err := os.WriteFile(mock, []byte("routes:\n  - host: api.example.com\n    path: /v1/ping\n    json: {pong: true}\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	call("POST", "/v1/sessions", map[string]any{"net": []string{"bogus"}}, http.StatusBadRequest)
	open := call("POST", "/v1/sessions", map[string]any{"net": []string{"mock:" + mock}, "env": testPath}, http.StatusCreated)
	id, _ := open["session_id"].(string)
	t.Cleanup(func() { svc.CloseSession(id) })

	events := func(v any) []dryexec.NetworkEvent {
		b, _ := json.Marshal(v)
		var evs []dryexec.NetworkEvent
		json.Unmarshal(b, &evs)
		return evs
	}
	sh := call("POST", "/v1/sessions/"+id+"/shell", map[string]any{"command": "curl -sS https://api.example.com/v1/ping"}, 200)
	if sh["stdout"] != `{"pong":true}` {
		t.Errorf("curl got %q, want the mocked JSON", sh["stdout"])
	}
	if evs := events(sh["network"]); !hasURL(evs, "https://api.example.com/v1/ping", "mocked") {
		t.Errorf("the shell result's network lacks the request: %v", sh["network"])
	}
	py := call("POST", "/v1/sessions/"+id+"/python", map[string]any{"code": "import urllib.request as u\nu.urlopen('http://api.example.com/v1/ping').read()"}, 200)
	if evs := events(py["network"]); !hasURL(evs, "http://api.example.com/v1/ping", "mocked") || hasURL(evs, "https://api.example.com/v1/ping", "mocked") {
		t.Errorf("the Python result's network is not its own exec's: %v", py["network"])
	}
	log := call("GET", "/v1/sessions/"+id+"/network", nil, 200)
	all := events(log["network"])
	if !hasURL(all, "https://api.example.com/v1/ping", "mocked") || !hasURL(all, "http://api.example.com/v1/ping", "mocked") {
		t.Errorf("the session's log lacks a request: %v", log["network"])
	}
	if next, _ := log["next"].(float64); int(next) != len(all) {
		t.Errorf("next %v, want %d", log["next"], len(all))
	}
	if rest := call("GET", "/v1/sessions/"+id+"/network?after=1", nil, 200); len(events(rest["network"])) != len(all)-1 {
		t.Errorf("after=1 gave %v", rest["network"])
	}
}
