package server_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/internal/testwait"
	"github.com/dryexec/dryexec/schema"
	"github.com/dryexec/dryexec/server"
)

// Every route the server has is in openapi.json and every documented route is
// served (the mux answers it, not its no_route fallback).
func TestOpenAPIMatchesRoutes(t *testing.T) {
	doc, err := openapi3.NewLoader().LoadFromData(server.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("openapi.json is not valid OpenAPI 3: %v", err)
	}
	var documented []string
	for p, item := range doc.Paths.Map() {
		for m := range item.Operations() {
			documented = append(documented, m+" "+p)
		}
	}
	served := server.Routes()
	sort.Strings(documented)
	sort.Strings(served)
	if strings.Join(documented, "\n") != strings.Join(served, "\n") {
		t.Fatalf("openapi.json and the routes differ\ndocumented:\n%s\n\nserved:\n%s", strings.Join(documented, "\n"), strings.Join(served, "\n"))
	}
	// The live daemon answers each documented route with its own handler.
	d := startDaemon(t, server.Config{}, server.HandlerOptions{})
	fill := strings.NewReplacer("{id}", "tr_aaaaaaaaaaaaaaaaaaaa", "{key}", "k", "{call}", "hc_x")
	for _, r := range documented {
		method, p, _ := strings.Cut(r, " ")
		if strings.HasPrefix(p, "/v1/sessions/{id}") {
			p = strings.Replace(p, "{id}", "se_aaaaaaaaaaaaaaaaaaaa", 1)
		}
		resp, data := d.do(t, method, fill.Replace(p), "{}")
		var e apiErr
		json.Unmarshal(data, &e)
		if e.Error.Code == "no_route" || e.Error.Code == "method_not_allowed" || resp.StatusCode == http.StatusMethodNotAllowed {
			t.Errorf("%s: not served (%d %s)", r, resp.StatusCode, data)
		}
	}
	d.fails(t, "GET", "/v1/nothing", nil, 404, "no_route")
	d.fails(t, "DELETE", "/v1/trials", nil, 405, "method_not_allowed")
	var v map[string]any
	d.ok(t, "GET", "/v1/version", nil, 200, &v)
	if v["schema"] != dryexec.SchemaV1 || v["api"] != "v1" {
		t.Fatalf("version: %v", v)
	}
}

// Over TCP every request needs the token; a refused one runs nothing.
func TestAuthTCP(t *testing.T) {
	requireNS(t)
	home := filepath.Join(t.TempDir(), "home")
	svc, err := server.NewService(server.Config{StoreDir: home})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- server.Serve(ctx, svc, server.ServeOptions{Listen: "127.0.0.1:0", Ready: func(a string) { addr <- a }})
	}()
	base := "http://" + <-addr
	defer func() { cancel(); <-done }()
	tokFile := server.TokenFile(svc.Config().StateDir)
	info, err := os.Stat(tokFile)
	if err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("token file: %v %v", info, err)
	}
	tok, err := server.LoadOrCreateToken(tokFile)
	if err != nil || len(tok) < 32 {
		t.Fatalf("token: %q %v", tok, err)
	}
	wd := t.TempDir()
	body := fmt.Sprintf(`{"argv":["sh","-c","echo x > f"],"cwd":%q}`, wd)
	for _, tc := range []struct {
		name, header string
		want         int
	}{
		{"no token", "", 401},
		{"wrong token", "Bearer " + strings.Repeat("0", len(tok)), 401},
		{"token prefix", "Bearer " + tok[:len(tok)-1], 401},
		{"token without Bearer", tok, 401},
		{"basic auth", "Basic " + tok, 401},
		{"lower-case scheme", "bearer " + tok, 401},
		{"right token", "Bearer " + tok, 201},
	} {
		for _, path := range []string{"/v1/trials", "/v1/health", "/v1/openapi.json", "/mcp"} {
			method := "GET"
			if path == "/v1/trials" {
				method = "POST"
			}
			if path == "/mcp" && tc.want != 401 {
				continue
			}
			req, _ := http.NewRequest(method, base+path, strings.NewReader(body))
			req.Header.Set("Content-Type", "application/json")
			if tc.header != "" {
				req.Header.Set("Authorization", tc.header)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			want := tc.want
			if want == 201 && method == "GET" {
				want = 200
			}
			if resp.StatusCode != want {
				t.Errorf("%s %s: %d, want %d", tc.name, path, resp.StatusCode, want)
			}
		}
		if tc.want == 401 {
			if list, _ := svc.Trials(); len(list) != 0 {
				t.Fatalf("%s: a refused request ran a trial: %+v", tc.name, list)
			}
		}
	}
	if list, _ := svc.Trials(); len(list) != 1 {
		t.Fatalf("the authorised request ran %d trials, want 1", len(list))
	}
	// The token survives a restart; a token file others can read is refused.
	if again, err := server.LoadOrCreateToken(tokFile); err != nil || again != tok {
		t.Fatalf("token changed on reload: %v", err)
	}
	os.Chmod(tokFile, 0o644)
	if _, err := server.LoadOrCreateToken(tokFile); err == nil {
		t.Fatal("a world-readable token file was accepted")
	}
}

// The socket is 0600; a stale one is replaced; a live one or a non-socket is
// left alone.
func TestUnixSocket(t *testing.T) {
	d := startDaemon(t, server.Config{}, server.HandlerOptions{})
	info, err := os.Stat(d.sock)
	if err != nil || info.Mode()&os.ModeSocket == 0 || info.Mode().Perm() != 0o600 {
		t.Fatalf("socket: %v %v", info.Mode(), err)
	}
	svc, _ := server.NewService(server.Config{StoreDir: t.TempDir()})
	if err := server.Serve(context.Background(), svc, server.ServeOptions{Socket: d.sock}); err == nil || !strings.Contains(err.Error(), "already listening") {
		t.Fatalf("a second daemon on a live socket: %v", err)
	}
	dir := t.TempDir()
	plain := filepath.Join(dir, "file")
	os.WriteFile(plain, []byte("keep"), 0o600)
	svc, _ = server.NewService(server.Config{StoreDir: t.TempDir()})
	if err := server.Serve(context.Background(), svc, server.ServeOptions{Socket: plain}); err == nil {
		t.Fatal("served over a regular file")
	}
	if b, _ := os.ReadFile(plain); string(b) != "keep" {
		t.Fatal("the regular file was touched")
	}
	stale := filepath.Join(dir, "stale.sock")
	ln, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	startDaemon(t, server.Config{}, server.HandlerOptions{}) // unrelated, keeps helpers honest
	svc, _ = server.NewService(server.Config{StoreDir: t.TempDir()})
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- server.Serve(ctx, svc, server.ServeOptions{Socket: stale, Ready: func(a string) { ready <- a }})
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("a stale socket blocked the start: %v", err)
	}
	cancel()
	<-done
	if _, err := os.Lstat(stale); !os.IsNotExist(err) {
		t.Fatalf("the socket was not removed at shutdown: %v", err)
	}
}

func tarOf(t *testing.T, entries ...tar.Header) []byte {
	var b bytes.Buffer
	tw := tar.NewWriter(&b)
	for _, h := range entries {
		if h.Typeflag == tar.TypeReg {
			h.Size = 1
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		tw.WriteHeader(&h)
		if h.Typeflag == tar.TypeReg {
			tw.Write([]byte("x"))
		}
	}
	tw.Close()
	return b.Bytes()
}

// Bad input is refused with a 4xx and a message, before anything runs.
func TestBadInput(t *testing.T) {
	requireNS(t)
	d := startDaemon(t, server.Config{}, server.HandlerOptions{MaxBody: 4096})
	wd := t.TempDir()
	var sess server.SessionInfo
	d.ok(t, "POST", "/v1/sessions", server.SessionRequest{Rung: "host"}, 201, &sess)
	sp := "/v1/sessions/" + sess.SessionID
	big := fmt.Sprintf(`{"argv":["echo",%q],"cwd":%q}`, strings.Repeat("x", 5000), wd)
	cases := []struct {
		name, method, path string
		body               any
		status             int
		code               string
	}{
		{"bad json", "POST", "/v1/trials", `{"argv": [`, 400, "bad_request"},
		{"wrong type", "POST", "/v1/trials", `{"argv": "ls", "cwd": "/"}`, 400, "bad_request"},
		{"unknown field", "POST", "/v1/trials", `{"argv": ["ls"], "cwd": "/", "sudo": true}`, 400, "bad_request"},
		{"trailing data", "POST", "/v1/trials", `{"argv": ["ls"], "cwd": "/"} {}`, 400, "bad_request"},
		{"empty body", "POST", "/v1/trials", "", 400, "bad_request"},
		{"oversized body", "POST", "/v1/trials", big, 413, "too_large"},
		{"empty argv", "POST", "/v1/trials", server.TrialRequest{Cwd: wd}, 400, "bad_request"},
		{"relative cwd", "POST", "/v1/trials", server.TrialRequest{Argv: []string{"ls"}, Cwd: "tmp"}, 400, "bad_request"},
		{"cwd traversal", "POST", "/v1/trials", server.TrialRequest{Argv: []string{"ls"}, Cwd: wd + "/../../etc"}, 400, "bad_request"},
		{"cwd NUL", "POST", "/v1/trials", server.TrialRequest{Argv: []string{"ls"}, Cwd: "/tmp\x00x"}, 400, "bad_request"},
		{"negative timeout", "POST", "/v1/trials", server.TrialRequest{Argv: []string{"ls"}, Cwd: wd, TimeoutMS: -1}, 400, "bad_request"},
		{"bad env name", "POST", "/v1/trials", server.TrialRequest{Argv: []string{"ls"}, Cwd: wd, Env: map[string]string{"A=B": "x"}}, 400, "bad_request"},
		{"relative mask", "POST", "/v1/trials", server.TrialRequest{Argv: []string{"ls"}, Cwd: wd, Masks: []string{"home/.ssh"}}, 400, "bad_request"},
		{"mask traversal", "POST", "/v1/trials", server.TrialRequest{Argv: []string{"ls"}, Cwd: wd, Masks: []string{"/home/../etc"}}, 400, "bad_request"},
		{"tiny memory", "POST", "/v1/trials", server.TrialRequest{Argv: []string{"ls"}, Cwd: wd, Limits: &server.LimitsRequest{MemoryBytes: 1}}, 400, "bad_request"},
		{"session tiny pids", "POST", "/v1/sessions", server.SessionRequest{Limits: &server.LimitsRequest{Pids: 2}}, 400, "bad_request"},
		{"bad net", "POST", "/v1/trials", server.TrialRequest{Argv: []string{"ls"}, Cwd: wd, Net: []string{"everything"}}, 400, "bad_request"},
		{"net none and allow", "POST", "/v1/trials", server.TrialRequest{Argv: []string{"ls"}, Cwd: wd, Net: []string{"allow:example.com", "none"}}, 400, "bad_request"},
		{"relative mock file", "POST", "/v1/trials", server.TrialRequest{Argv: []string{"ls"}, Cwd: wd, Net: []string{"mock:mocks.yaml"}}, 400, "bad_request"},
		{"mock file traversal", "POST", "/v1/trials", server.TrialRequest{Argv: []string{"ls"}, Cwd: wd, Net: []string{"mock:/tmp/../etc/shadow"}}, 400, "bad_request"},
		{"bad policy", "POST", "/v1/trials", `{"argv":["ls"],"cwd":"/","policy":{"nonsense":1}}`, 400, "policy"},
		{"unknown rung", "POST", "/v1/trials", server.TrialRequest{Argv: []string{"ls"}, Cwd: wd, Rung: "nope"}, 400, "bad_request"},
		{"session unknown rung", "POST", "/v1/sessions", server.SessionRequest{Rung: "nope"}, 400, "bad_request"},
		{"net none then allow", "POST", "/v1/trials", server.TrialRequest{Argv: []string{"ls"}, Cwd: wd, Net: []string{"none", "allow:example.com:443"}}, 400, "bad_request"},
		{"session net none then allow", "POST", "/v1/sessions", server.SessionRequest{Net: []string{"none", "allow:example.com:443"}}, 400, "bad_request"},
		{"net loopback rule", "POST", "/v1/trials", server.TrialRequest{Argv: []string{"ls"}, Cwd: wd, Net: []string{"allow:127.0.0.1:8080"}}, 400, "bad_request"},
		{"net missing mock file", "POST", "/v1/trials", server.TrialRequest{Argv: []string{"ls"}, Cwd: wd, Net: []string{"mock:/nonexistent/mock.yaml"}}, 400, "bad_request"},
		{"missing cwd", "POST", "/v1/trials", server.TrialRequest{Argv: []string{"ls"}, Cwd: "/nonexistent/dir"}, 400, "bad_request"},
		{"empty argv[0]", "POST", "/v1/trials", server.TrialRequest{Argv: []string{""}, Cwd: wd}, 400, "bad_request"},
		{"negative pids", "POST", "/v1/trials", server.TrialRequest{Argv: []string{"ls"}, Cwd: wd, Limits: &server.LimitsRequest{Pids: -5}}, 400, "bad_request"},
		{"unavailable rung", "POST", "/v1/trials", server.TrialRequest{Argv: []string{"ls"}, Cwd: wd, Rung: "vm"}, 503, "isolation_unavailable"},
		{"trial id traversal", "GET", "/v1/trials/..%2F..%2Fetc", nil, 400, "bad_request"},
		{"trial id shape", "GET", "/v1/trials/tr_x", nil, 400, "bad_request"},
		{"unknown trial", "GET", "/v1/trials/tr_aaaaaaaaaaaaaaaaaaaa", nil, 404, "not_found"},
		{"commit traversal", "POST", "/v1/trials/tr_aaaaaaaaaaaaaaaaaaaa/commit", server.CommitRequest{Paths: []string{wd + "/../x"}}, 400, "bad_request"},
		{"commit relative", "POST", "/v1/trials/tr_aaaaaaaaaaaaaaaaaaaa/commit", server.CommitRequest{Paths: []string{"x"}}, 400, "bad_request"},
		{"discard unknown", "POST", "/v1/trials/tr_aaaaaaaaaaaaaaaaaaaa/discard", nil, 404, "not_found"},
		{"workspace traversal", "POST", "/v1/sessions", server.SessionRequest{Workspace: "/workspace/../etc"}, 400, "bad_request"},
		{"workspace root", "POST", "/v1/sessions", server.SessionRequest{Workspace: "/"}, 400, "bad_request"},
		{"host object wildcard", "POST", "/v1/sessions", server.SessionRequest{Rung: "host", HostObjects: map[string][]string{"db": {"*"}}}, 403, "policy"},
		{"host object name", "POST", "/v1/sessions", server.SessionRequest{Rung: "host", HostObjects: map[string][]string{"__import__": {"x"}}}, 400, "bad_request"},
		{"session rung", "POST", "/v1/sessions", server.SessionRequest{Rung: "vm"}, 503, "isolation_unavailable"},
		{"session id shape", "POST", "/v1/sessions/../../x/shell", server.ShellRequest{Command: "ls"}, 404, "no_route"},
		{"bad session id", "POST", "/v1/sessions/se_%2E%2E/shell", server.ShellRequest{Command: "ls"}, 400, "bad_request"},
		{"unknown session", "POST", "/v1/sessions/se_aaaaaaaaaaaaaaaaaaaa/shell", server.ShellRequest{Command: "ls"}, 404, "not_found"},
		{"shell unknown field", "POST", sp + "/shell", `{"command":"ls","cwd":"/"}`, 400, "bad_request"},
		{"file value traversal", "POST", sp + "/python", `{"code":"1","inputs":{"p":{"type":"file","path":"../../etc/passwd"}}}`, 400, "bad_request"},
		{"bad value type", "POST", sp + "/python", `{"code":"1","inputs":{"p":{"type":"pickle","bytes":"AA=="}}}`, 422, "not_representable"},
		{"mixed value", "POST", sp + "/python", `{"code":"1","inputs":{"p":{"type":"json","json":1,"path":"x"}}}`, 422, "not_representable"},
		{"bad input name", "POST", sp + "/python", `{"code":"1","inputs":{"1x":{"type":"json","json":1}}}`, 400, "bad_request"},
		{"host answer without call", "POST", sp + "/hostcalls/hc_nope", `{"value":{"type":"json","json":1}}`, 404, "not_found"},
		{"host answer both", "POST", sp + "/hostcalls/hc_nope", `{"value":{"type":"json","json":1},"error":{"code":"type","message":"x"}}`, 400, "bad_request"},
		{"events after", "GET", sp + "/events?after=-1", nil, 400, "bad_request"},
		{"hostcalls wait", "GET", sp + "/hostcalls?wait_ms=999999", nil, 400, "bad_request"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d.fails(t, tc.method, tc.path, tc.body, tc.status, tc.code)
		})
	}
	// Content types: a body must be declared JSON (a missing header is a
	// 415 too); an optional body that is absent needs no header.
	for _, tc := range []struct {
		name, path, ct, body string
		status               int
	}{
		{"text/plain body", "/v1/trials", "text/plain", `{"argv":["ls"],"cwd":"/"}`, 415},
		{"no Content-Type", "/v1/trials", "", `{"argv":["ls"],"cwd":"/"}`, 415},
		{"no Content-Type, optional body sent", "/v1/trials/tr_aaaaaaaaaaaaaaaaaaaa/commit", "", `{}`, 415},
		{"a lookalike type", "/v1/trials", "application/jsonx", `{"argv":["ls"],"cwd":"/"}`, 415},
		{"no Content-Type, no optional body", "/v1/trials/tr_aaaaaaaaaaaaaaaaaaaa/discard", "", "", 404},
		{"JSON with a charset", "/v1/trials/tr_aaaaaaaaaaaaaaaaaaaa/commit", "application/json; charset=utf-8", `{}`, 404},
	} {
		req, _ := http.NewRequest("POST", d.base+tc.path, strings.NewReader(tc.body))
		if tc.ct != "" {
			req.Header.Set("Content-Type", tc.ct)
		}
		resp, err := d.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e struct{ Error server.APIError }
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != tc.status || (tc.status == 415 && e.Error.Code != "unsupported_media_type") {
			t.Errorf("%s: %d %+v, want %d", tc.name, resp.StatusCode, e, tc.status)
		}
	}
	// Trees that would land outside the workspace never reach the session.
	for _, tc := range []struct {
		name string
		tree []byte
	}{
		{"dotdot", tarOf(t, tar.Header{Name: "../evil", Typeflag: tar.TypeReg})},
		{"nested dotdot", tarOf(t, tar.Header{Name: "a/../../evil", Typeflag: tar.TypeReg})},
		{"absolute", tarOf(t, tar.Header{Name: "/etc/evil", Typeflag: tar.TypeReg})},
		{"hard link out", tarOf(t, tar.Header{Name: "l", Typeflag: tar.TypeLink, Linkname: "../../etc/passwd"})},
		{"device", tarOf(t, tar.Header{Name: "dev", Typeflag: tar.TypeChar})},
		{"not tar", []byte("this is not a tar stream at all, not even close, and it is long enough to be read as a header block? no.")},
	} {
		req, _ := http.NewRequest("PUT", d.base+sp+"/tree", bytes.NewReader(tc.tree))
		req.Header.Set("Content-Type", "application/x-tar")
		resp, err := d.client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var e apiErr
		json.NewDecoder(resp.Body).Decode(&e)
		resp.Body.Close()
		if resp.StatusCode != 400 || e.Error.Code != "bad_request" {
			t.Errorf("tree %s: %d %+v", tc.name, resp.StatusCode, e)
		}
	}
	// Nothing above ran a trial.
	if list, _ := d.svc.Trials(); len(list) != 0 {
		t.Fatalf("refused requests ran trials: %+v", list)
	}
	// A commit of a path the trial did not change: 400, naming what it did
	// change, and nothing committed.
	tr := d.trial(t, wd, "sh", "-c", "echo a > a")
	e := d.fails(t, "POST", "/v1/trials/"+tr.TrialID+"/commit", server.CommitRequest{Paths: []string{wd + "/b"}}, 400, "bad_request")
	if !strings.Contains(e.Message, "changed nothing at or beneath "+wd+"/b") || !strings.Contains(e.Message, wd+"/a") {
		t.Errorf("commit of a path not in the trial: %q", e.Message)
	}
	if _, err := os.Stat(wd + "/a"); err == nil {
		t.Error("a refused commit changed the host")
	}
}

// TestConcurrentTrials: 24 trials at once through a limit of 4, cold and through the warm pool
// (where the first take ready sandboxes and the rest run cold while it
// refills): every delta is its own trial's.
func TestConcurrentTrials(t *testing.T) {
	for _, pool := range []int{0, 2} {
		t.Run(fmt.Sprintf("pool=%d", pool), func(t *testing.T) { testConcurrentTrials(t, pool) })
	}
}

func testConcurrentTrials(t *testing.T, pool int) {
	requireNS(t)
	d := startDaemon(t, server.Config{MaxTrials: 4, MaxQueue: 64, Pool: pool}, server.HandlerOptions{})
	wd := t.TempDir()
	v, err := schema.NewValidator()
	if err != nil {
		t.Fatal(err)
	}
	const n = 24
	var wg sync.WaitGroup
	deltas := make([]*dryexec.StateDelta, n)
	raws := make([][]byte, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var delta dryexec.StateDelta
			resp, data := d.do(t, "POST", "/v1/trials", server.TrialRequest{Argv: []string{"sh", "-c", fmt.Sprintf("echo %d > f%d; echo out%d; echo err%d >&2", i, i, i, i)}, Cwd: wd})
			if resp.StatusCode != 201 || json.Unmarshal(data, &delta) != nil {
				t.Errorf("trial %d: %d %s", i, resp.StatusCode, data)
				return
			}
			deltas[i], raws[i] = &delta, data
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	ids := map[string]bool{}
	for i, delta := range deltas {
		if err := v.Validate(bytes.TrimSpace(raws[i])); err != nil {
			t.Errorf("trial %d: invalid delta: %v", i, err)
		}
		ids[delta.TrialID] = true
		want := filepath.Join(wd, fmt.Sprintf("f%d", i))
		if len(delta.Files) != 1 || delta.Files[0].Path != want || delta.Files[0].Op != dryexec.OpCreate || delta.Files[0].Size != int64(len(fmt.Sprint(i))+1) {
			t.Errorf("trial %d: files %+v, want only %s", i, delta.Files, want)
		}
		if delta.Process.Stdout != fmt.Sprintf("out%d\n", i) || delta.Process.Stderr != fmt.Sprintf("err%d\n", i) || delta.Process.ExitCode != 0 {
			t.Errorf("trial %d: %+v", i, delta.Process)
		}
		if _, err := os.Stat(want); !os.IsNotExist(err) {
			t.Errorf("trial %d changed the host", i)
		}
	}
	if len(ids) != n {
		t.Fatalf("%d distinct trial ids for %d trials", len(ids), n)
	}
	if list, _ := d.svc.Trials(); len(list) != n {
		t.Fatalf("%d trials stored, want %d", len(list), n)
	}
	var health struct {
		Pool *struct{ Size, Hits, Misses int }
	}
	d.ok(t, "GET", "/v1/health", nil, 200, &health)
	switch {
	case pool == 0 && health.Pool != nil:
		t.Fatalf("health reports a pool that was not asked for: %+v", health.Pool)
	case pool > 0 && (health.Pool == nil || health.Pool.Size != pool || health.Pool.Hits+health.Pool.Misses != n || health.Pool.Hits == 0):
		t.Fatalf("health's pool figures: %+v, want size %d and %d trials with some hits", health.Pool, pool, n)
	}
}

// A full queue refuses with 503 busy (and Retry-After) instead of waiting.
func TestQueueLimit(t *testing.T) {
	requireNS(t)
	d := startDaemon(t, server.Config{MaxTrials: 1, MaxQueue: 1}, server.HandlerOptions{})
	wd := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Each trial waits on stdin-less sleep; the requests are cancelled at the end.
	long := server.TrialRequest{Argv: []string{"sleep", "60"}, Cwd: wd}
	sc1, close1 := d.stream(t, ctx, long)
	defer close1()
	if e := nextEvent(t, sc1); e.Event != "started" {
		t.Fatalf("first: %+v", e)
	}
	sc2, close2 := d.stream(t, ctx, long)
	defer close2()
	if e := nextEvent(t, sc2); e.Event != "queued" {
		t.Fatalf("second: %+v", e)
	}
	resp, data := d.do(t, "POST", "/v1/trials", long)
	if resp.StatusCode != 503 || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(data), `"busy"`) {
		t.Fatalf("third: %d %s", resp.StatusCode, data)
	}
	var h map[string]any
	d.ok(t, "GET", "/v1/health", nil, 200, &h)
	if h["trials_running"] != 1.0 || h["trials_queued"] != 1.0 {
		t.Fatalf("health: %v", h)
	}
}

// Output is streamed while the trial runs; closing the stream kills it.
func TestStreamWhileRunning(t *testing.T) {
	requireNS(t)
	d := startDaemon(t, server.Config{}, server.HandlerOptions{})
	wd := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sc, closeStream := d.stream(t, ctx, server.TrialRequest{Argv: []string{"sh", "-c", "echo first; echo oops >&2; exec sleep 60"}, Cwd: wd})
	started := nextEvent(t, sc)
	if started.Event != "started" || started.TrialID == "" {
		t.Fatalf("first event: %+v", started)
	}
	got := map[string]string{}
	for len(got) < 2 {
		e := nextEvent(t, sc)
		got[e.Event] += e.Data
	}
	if got["stdout"] != "first\n" || got["stderr"] != "oops\n" {
		t.Fatalf("streamed %v", got)
	}
	// The output arrived while the command was still running.
	var h map[string]any
	d.ok(t, "GET", "/v1/health", nil, 200, &h)
	if h["trials_running"] != 1.0 {
		t.Fatalf("health after the output: %v", h)
	}
	closeStream()
	cancel()
	// The trial is killed and not stored.
	waitIdle(t, d)
	if _, _, err := d.svc.Trial(started.TrialID); err == nil {
		t.Fatal("a trial whose client went away was stored")
	}
	// A complete stream ends with the delta.
	sc, closeStream = d.stream(t, context.Background(), server.TrialRequest{Argv: []string{"sh", "-c", "echo a"}, Cwd: wd})
	defer closeStream()
	var last event
	for sc.Scan() {
		json.Unmarshal(sc.Bytes(), &last)
	}
	if last.Event != "delta" || last.Delta == nil || last.Delta.Process.Stdout != "a\n" {
		t.Fatalf("last event: %+v", last)
	}
}

// create → get → list → commit some paths → commit again → discard.
func TestTrialLifecycle(t *testing.T) {
	requireNS(t)
	d := startDaemon(t, server.Config{}, server.HandlerOptions{})
	wd := t.TempDir()
	delta := d.trial(t, wd, "sh", "-c", "echo a > a; echo b > b")
	if len(delta.Files) != 2 {
		t.Fatalf("files: %+v", delta.Files)
	}
	var got dryexec.StateDelta
	resp, data := d.do(t, "GET", "/v1/trials/"+delta.TrialID, nil)
	json.Unmarshal(data, &got)
	if resp.StatusCode != 200 || got.TrialID != delta.TrialID || resp.Header.Get("X-Dryexec-Status") != "pending" {
		t.Fatalf("get: %d %s", resp.StatusCode, data)
	}
	// No network exchange was made: the trial's exchanges are an empty list;
	// an unknown trial has none to give.
	if resp, data := d.do(t, "GET", "/v1/trials/"+delta.TrialID+"/network", nil); resp.StatusCode != 200 || strings.TrimSpace(string(data)) != "[]" {
		t.Fatalf("network: %d %s", resp.StatusCode, data)
	}
	if resp, _ := d.do(t, "GET", "/v1/trials/"+dryexec.NewTrialID()+"/network", nil); resp.StatusCode != 404 {
		t.Fatalf("network of an unknown trial: %d", resp.StatusCode)
	}
	var list struct{ Trials []server.TrialSummary }
	d.ok(t, "GET", "/v1/trials", nil, 200, &list)
	if len(list.Trials) != 1 || list.Trials[0].TrialID != delta.TrialID || list.Trials[0].FilesChanged != 2 {
		t.Fatalf("list: %+v", list)
	}
	var res struct{ Applied []dryexec.FileChange }
	d.ok(t, "POST", "/v1/trials/"+delta.TrialID+"/commit", server.CommitRequest{Paths: []string{filepath.Join(wd, "a")}}, 200, &res)
	if len(res.Applied) != 1 {
		t.Fatalf("applied: %+v", res)
	}
	if b, _ := os.ReadFile(filepath.Join(wd, "a")); string(b) != "a\n" {
		t.Fatalf("a on the host: %q", b)
	}
	if _, err := os.Stat(filepath.Join(wd, "b")); !os.IsNotExist(err) {
		t.Fatal("b was committed though not selected")
	}
	// The selective commit left b: the trial is partial, a path already
	// committed is refused, a commit applies the rest, and then it is done.
	if resp, _ := d.do(t, "GET", "/v1/trials/"+delta.TrialID, nil); resp.Header.Get("X-Dryexec-Status") != "partial" {
		t.Fatalf("status after a selective commit: %q", resp.Header.Get("X-Dryexec-Status"))
	}
	d.fails(t, "POST", "/v1/trials/"+delta.TrialID+"/commit", server.CommitRequest{Paths: []string{filepath.Join(wd, "a")}}, 409, "already_done")
	d.ok(t, "POST", "/v1/trials/"+delta.TrialID+"/commit", nil, 200, &res)
	if len(res.Applied) != 1 || res.Applied[0].Path != filepath.Join(wd, "b") {
		t.Fatalf("commit of the rest applied %+v", res.Applied)
	}
	d.fails(t, "POST", "/v1/trials/"+delta.TrialID+"/commit", nil, 409, "already_done")
	d.fails(t, "POST", "/v1/trials/"+delta.TrialID+"/discard", nil, 409, "already_done")
	other := d.trial(t, wd, "sh", "-c", "echo c > c")
	d.ok(t, "POST", "/v1/trials/"+other.TrialID+"/discard", nil, 200, nil)
	d.fails(t, "POST", "/v1/trials/"+other.TrialID+"/commit", nil, 409, "already_done")
	// A conflict names the path and changes nothing.
	third := d.trial(t, wd, "sh", "-c", "echo new > a")
	os.WriteFile(filepath.Join(wd, "a"), []byte("changed meanwhile\n"), 0o644)
	e := d.fails(t, "POST", "/v1/trials/"+third.TrialID+"/commit", nil, 409, "commit_conflict")
	if len(e.Conflicts) != 1 || e.Conflicts[0].Path != filepath.Join(wd, "a") {
		t.Fatalf("conflicts: %+v", e.Conflicts)
	}
}

// waitIdle waits (bounded) until the daemon runs no trial.
func waitIdle(t *testing.T, d *daemon) {
	t.Helper()
	testwait.For(t, time.Minute, "no trial running or queued", func() bool {
		running, queued, _ := d.svc.Counts()
		return running == 0 && queued == 0
	})
}

// The install's receipt key is masked in every daemon sandbox, trial and
// session: a command that could read it could forge receipts.
func TestReceiptKeyMasked(t *testing.T) {
	requireNS(t)
	d := startDaemon(t, server.Config{}, server.HandlerOptions{})
	key := filepath.Join(d.home, "receipt-key.pem")
	if b, err := os.ReadFile(key); err != nil || len(b) == 0 {
		t.Fatalf("no receipt key to protect: %v", err)
	}
	delta := d.trial(t, t.TempDir(), "sh", "-c", "cat "+key+"; cp "+key+" stolen 2>/dev/null; true")
	if strings.Contains(delta.Process.Stdout, "PRIVATE KEY") {
		t.Fatal("a trial read the receipt key")
	}
	for _, f := range delta.Files {
		if f.Size > 0 {
			t.Fatalf("a trial copied the receipt key: %+v", f)
		}
	}
	var info server.SessionInfo
	d.ok(t, "POST", "/v1/sessions", server.SessionRequest{Rung: "ns"}, 201, &info)
	var sr struct{ Transcript string }
	d.ok(t, "POST", "/v1/sessions/"+info.SessionID+"/shell", server.ShellRequest{Command: "cat " + key}, 200, &sr)
	if strings.Contains(sr.Transcript, "PRIVATE KEY") {
		t.Fatal("a session read the receipt key")
	}
}

// TestListenerUnreachable: while the daemon serves TCP, no rule of a trial or
// session may reach its listener — by its address, any address of the host
// when it listens on all of them, or a mock file's rule — and its bearer
// token is masked in every trial. A trial once used the token through such a
// rule to commit a host write.
func TestListenerUnreachable(t *testing.T) {
	requireNS(t)
	home := filepath.Join(t.TempDir(), "home")
	svc, err := server.NewService(server.Config{StoreDir: home})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	addr := make(chan string, 1)
	done := make(chan error, 1)
	go func() {
		done <- server.Serve(ctx, svc, server.ServeOptions{Listen: "0.0.0.0:0", Ready: func(a string) { addr <- a }})
	}()
	listen := <-addr
	defer func() { cancel(); <-done }()
	_, portStr, _ := net.SplitHostPort(listen)
	base := "http://127.0.0.1:" + portStr
	if got := server.ReadListen(svc.Config().StateDir); got != listen {
		t.Fatalf("listen file says %q, want %q", got, listen)
	}
	tok, err := server.LoadOrCreateToken(server.TokenFile(svc.Config().StateDir))
	if err != nil {
		t.Fatal(err)
	}
	post := func(path string, body any) (int, string) {
		b, _ := json.Marshal(body)
		req, _ := http.NewRequest("POST", base+path, bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+tok)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		rb, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(rb)
	}
	var local string
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() {
			local = ipn.IP.String()
		}
	}
	wd := t.TempDir()
	mock := filepath.Join(wd, "m.yaml")
	specs := [][]string{{"allow:127.0.0.1:" + portStr}, {"allow:[::]:" + portStr}, {"allow:localhost"}}
	if local != "" {
		if err := os.WriteFile(mock, []byte("allow:\n  - host: "+local+"\n    port: "+portStr+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		specs = append(specs, []string{"allow:" + local + ":" + portStr}, []string{"allow:" + local}, []string{"mock:" + mock})
	}
	for _, spec := range specs {
		code, body := post("/v1/trials", server.TrialRequest{Argv: []string{"true"}, Cwd: wd, Net: spec})
		if code != 400 || !strings.Contains(body, "bad_request") {
			t.Errorf("trial with --net %v: %d %s", spec, code, body)
		}
		code, body = post("/v1/sessions", server.SessionRequest{Net: spec})
		if code != 400 || !strings.Contains(body, "bad_request") {
			t.Errorf("session with --net %v: %d %s", spec, code, body)
		}
	}
	if local != "" {
		if code, body := post("/v1/trials", server.TrialRequest{Argv: []string{"true"}, Cwd: wd, Net: []string{"allow:" + local + ":1"}}); code != 201 {
			t.Errorf("a rule for another port of the host was refused: %d %s", code, body)
		}
	}
	// The token is masked.
	code, body := post("/v1/trials", server.TrialRequest{Argv: []string{"sh", "-c", "cat " + server.TokenFile(svc.Config().StateDir) + " || true"}, Cwd: wd, NoStore: true})
	if code != 201 || strings.Contains(body, tok) {
		t.Fatalf("a trial read the daemon's token (or failed: %d)", code)
	}
}

// TestSocketUnreachable: a trial cannot talk to the daemon through its unix
// socket, which its view of the file system shows (the overlay's inode is not
// the listener's).
func TestSocketUnreachable(t *testing.T) {
	requireNS(t)
	d := startDaemon(t, server.Config{}, server.HandlerOptions{})
	tr := d.trial(t, t.TempDir(), "python3", "-c", `
import socket, sys
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(sys.argv[1])
    s.sendall(b"GET /v1/version HTTP/1.0\r\n\r\n")
    print("REACHED", s.recv(100))
except OSError as e:
    print("refused", e.errno)
`, d.sock)
	if strings.Contains(tr.Process.Stdout, "REACHED") || !strings.Contains(tr.Process.Stdout, "refused") {
		t.Fatalf("a trial and the daemon's socket: %q %q", tr.Process.Stdout, tr.Process.Stderr)
	}
}

// TestRequestCombinationsNever500: combinations of valid and broken fields
// for trials, sessions and commits are answered 2xx or 4xx (or 503 for a
// rung the host lacks), never 500: a 500 is for the daemon's own faults.
func TestRequestCombinationsNever500(t *testing.T) {
	requireNS(t)
	d := startDaemon(t, server.Config{}, server.HandlerOptions{})
	wd := t.TempDir()
	rnd := rand.New(rand.NewPCG(3, 4))
	pick := func(xs ...any) any { return xs[rnd.IntN(len(xs))] }
	strs := []any{"", "x", "\x00", "/", "..", "/nonexistent", wd, "rel/dir", "tr_aaaaaaaaaaaaaaaaaaaa", "none", "mock:/nonexistent", "allow:", "allow:127.0.0.1", "allow:example.com:0", "ns", "host", "best", "vm", "bogus"}
	nums := []any{-1, 0, 1, -9223372036854775808, 1e300, "7", nil}
	fields := map[string]func() any{
		"argv": func() any { return pick([]any{}, []any{""}, []any{"true"}, []any{pick(strs...)}, "true", nil) },
		"cwd":  func() any { return pick(strs...) },
		"env": func() any {
			return pick(map[string]any{"": "x"}, map[string]any{"A=B": "x"}, map[string]any{"A": "\x00"}, map[string]any{"A": 1}, nil)
		},
		"pass_env":         func() any { return pick([]any{"*"}, []any{""}, []any{"="}, "x") },
		"timeout_ms":       func() any { return pick(nums...) },
		"rung":             func() any { return pick(strs...) },
		"output_cap":       func() any { return pick(nums...) },
		"upper_size_bytes": func() any { return pick(nums...) },
		"limits": func() any {
			return pick(map[string]any{"pids": pick(nums...)}, map[string]any{"memory_bytes": pick(nums...)}, map[string]any{"cpus": pick(nums...)}, "x")
		},
		"masks": func() any { return pick([]any{pick(strs...)}, "x") },
		"net": func() any {
			return pick([]any{pick(strs...)}, []any{"none", pick(strs...)}, []any{pick(strs...), "none"}, "none")
		},
		"policy": func() any {
			return pick(map[string]any{"persistence": []any{map[string]any{"class": ""}}}, map[string]any{"thresholds": "x"}, "x", nil)
		},
		"workspace": func() any { return pick(strs...) },
		"paths":     func() any { return pick([]any{pick(strs...)}, "x") },
		"force":     func() any { return pick(true, "yes", nil) },
	}
	names := slices.Sorted(maps.Keys(fields))
	for i := range 80 {
		// Mostly a valid request with one or two fields broken, so that
		// checks deep in the request are reached, not only the first.
		body := map[string]any{"no_store": true, "argv": []any{"true"}, "cwd": wd}
		for n := 1 + rnd.IntN(2); n > 0; n-- {
			f := names[rnd.IntN(len(names))]
			body[f] = fields[f]()
		}
		path := pick("/v1/trials", "/v1/trials", "/v1/sessions", "/v1/trials/tr_aaaaaaaaaaaaaaaaaaaa/commit").(string)
		if path == "/v1/sessions" {
			delete(body, "no_store")
		}
		resp, data := d.do(t, "POST", path, body)
		if resp.StatusCode >= 500 && resp.StatusCode != 503 {
			t.Errorf("%d: POST %s %v: %d %s", i, path, body, resp.StatusCode, data)
		}
		if resp.StatusCode == 201 && path == "/v1/sessions" {
			var info server.SessionInfo
			if json.Unmarshal(data, &info) == nil && info.SessionID != "" {
				d.do(t, "DELETE", "/v1/sessions/"+info.SessionID, nil)
			}
		}
	}
}
