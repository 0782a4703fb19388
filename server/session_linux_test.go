package server_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dryexec/dryexec/internal/testwait"
	"github.com/dryexec/dryexec/server"
	"github.com/dryexec/dryexec/wire"
)

// Every session endpoint against a real ns session.
func TestSessionAPI(t *testing.T) {
	requireNS(t)
	d := startDaemon(t, server.Config{}, server.HandlerOptions{})
	var info server.SessionInfo
	d.ok(t, "POST", "/v1/sessions", server.SessionRequest{Rung: "ns"}, 201, &info)
	if info.Rung != "ns" || info.Workspace != "/workspace" || info.Staging != "overlay" {
		t.Fatalf("info: %+v", info)
	}
	sp := "/v1/sessions/" + info.SessionID
	var sr wire.ShellResult
	d.ok(t, "POST", sp+"/shell", server.ShellRequest{Command: "mkdir d && cd d && echo hi > a.txt && export X=1"}, 200, &sr)
	if sr.ExitCode != 0 {
		t.Fatalf("first shell: %+v", sr)
	}
	d.ok(t, "POST", sp+"/shell", server.ShellRequest{Command: "pwd; echo $X"}, 200, &sr)
	if sr.Cwd != "/workspace/d" || sr.Transcript != "/workspace/d\n1\n" {
		t.Fatalf("shell state did not persist: %+v", sr)
	}
	d.ok(t, "POST", sp+"/shell", server.ShellRequest{Command: "sleep 5", TimeoutMS: 100}, 200, &sr)
	if !sr.TimedOut || sr.ExitCode != 124 {
		t.Fatalf("timeout: %+v", sr)
	}
	var pr wire.PythonResult
	d.ok(t, "POST", sp+"/python", server.PythonRequest{Code: "emit('e', {'n': n}); cache['k'] = b'v'; out = data + b'!'; p = path\nn * 2",
		Inputs: map[string]wire.Value{"n": {Type: "json", JSON: 21}, "data": {Type: "bytes", Bytes: []byte("x")}, "path": {Type: "file", Path: "d/a.txt"}}}, 200, &pr)
	if !pr.OK || pr.Transcript != "42\n" || string(pr.Outputs["out"].Bytes) != "x!" || pr.Outputs["p"].Path != "d/a.txt" {
		t.Fatalf("python: %+v", pr)
	}
	var ev struct {
		Events []wire.Emit
		Next   int
	}
	d.ok(t, "GET", sp+"/events", nil, 200, &ev)
	if len(ev.Events) != 1 || ev.Events[0].Name != "e" || ev.Next != 1 {
		t.Fatalf("events: %+v", ev)
	}
	d.ok(t, "GET", sp+"/events?after=1", nil, 200, &ev)
	if len(ev.Events) != 0 {
		t.Fatalf("events after 1: %+v", ev)
	}
	resp, data := d.do(t, "GET", sp+"/cache/k", nil)
	if resp.StatusCode != 200 || string(data) != "v" {
		t.Fatalf("cache get: %d %q", resp.StatusCode, data)
	}
	d.ok(t, "PUT", sp+"/cache/k2", []byte("raw\x00bytes"), 200, nil)
	var keys struct{ Keys []string }
	d.ok(t, "GET", sp+"/cache", nil, 200, &keys)
	if strings.Join(keys.Keys, ",") != "k,k2" {
		t.Fatalf("keys: %v", keys)
	}
	d.ok(t, "DELETE", sp+"/cache/k", nil, 200, nil)
	d.fails(t, "GET", sp+"/cache/k", nil, 404, "not_found")
	var diff server.DiffResponse
	d.ok(t, "POST", sp+"/diff", nil, 200, &diff)
	if string(diff.Writes["d/a.txt"]) != "hi\n" || diff.Modes["d/a.txt"] != 0o644 {
		t.Fatalf("diff: %+v", diff)
	}
	d.ok(t, "POST", sp+"/reset", nil, 200, nil)
	diff = server.DiffResponse{} // Unmarshal would merge into the old maps
	d.ok(t, "POST", sp+"/diff", server.DiffRequest{Rebase: true}, 200, &diff)
	if len(diff.Writes) != 0 || len(diff.Deletes) != 0 {
		t.Fatalf("diff after reset: %+v", diff)
	}
	// Push a tree: it becomes the workspace and the baseline.
	req, _ := http.NewRequest("PUT", d.base+sp+"/tree", bytes.NewReader(tarOf(t, tar.Header{Name: "src/", Typeflag: tar.TypeDir, Mode: 0o755}, tar.Header{Name: "src/m.py", Typeflag: tar.TypeReg})))
	req.Header.Set("Content-Type", "application/x-tar")
	r2, err := d.client.Do(req)
	if err != nil || r2.StatusCode != 200 {
		t.Fatalf("push: %v %v", r2, err)
	}
	r2.Body.Close()
	d.ok(t, "POST", sp+"/shell", server.ShellRequest{Command: "cat /workspace/src/m.py; ls /workspace"}, 200, &sr)
	if sr.Transcript != "xsrc\n" {
		t.Fatalf("after push: %q", sr.Transcript)
	}
	var ping wire.Ping
	d.ok(t, "POST", sp+"/ping", nil, 200, &ping)
	if ping.Rung != "ns" {
		t.Fatalf("ping: %+v", ping)
	}
	var list struct{ Sessions []server.SessionInfo }
	d.ok(t, "GET", "/v1/sessions", nil, 200, &list)
	if len(list.Sessions) != 1 || list.Sessions[0].SessionID != info.SessionID {
		t.Fatalf("list: %+v", list)
	}
	d.ok(t, "DELETE", sp, nil, 200, nil)
	d.fails(t, "POST", sp+"/shell", server.ShellRequest{Command: "true"}, 404, "not_found")
	d.fails(t, "DELETE", sp, nil, 404, "not_found")
}

// A session's host objects are served by whoever polls its host calls: the
// daemon's allowlist refuses before a call is ever queued.
func TestHostObjectForwarding(t *testing.T) {
	requireNS(t)
	// Through a session the daemon opened ahead: host objects are bound
	// when it is handed out.
	d := startDaemon(t, server.Config{SessionPool: 1}, server.HandlerOptions{})
	type poolHealth struct {
		SessionPool *struct{ Ready, Busy, Hits int } `json:"session_pool"`
	}
	testwait.For(t, time.Minute, "the session pool to fill", func() bool {
		var h poolHealth
		d.ok(t, "GET", "/v1/health", nil, 200, &h)
		if h.SessionPool == nil {
			t.Fatal("no session pool in health")
		}
		return h.SessionPool.Ready == 1 && h.SessionPool.Busy == 0
	})
	var info server.SessionInfo
	d.ok(t, "POST", "/v1/sessions", server.SessionRequest{Rung: "ns", HostObjects: map[string][]string{"db": {"query", "fail"}}}, 201, &info)
	var h poolHealth
	if d.ok(t, "GET", "/v1/health", nil, 200, &h); h.SessionPool.Hits != 1 {
		t.Fatalf("the session was not the pooled one: %+v", *h.SessionPool)
	}
	sp := "/v1/sessions/" + info.SessionID
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	var seen []string
	done := make(chan struct{})
	go func() { // the client side: what the Python SDK does
		defer close(done)
		for ctx.Err() == nil {
			req, _ := http.NewRequestWithContext(ctx, "GET", d.base+sp+"/hostcalls?wait_ms=1000", nil)
			resp, err := d.client.Do(req)
			if err != nil {
				return
			}
			var c server.HostCall
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode == 204 {
				continue
			}
			if resp.StatusCode != 200 || json.Unmarshal(body, &c) != nil {
				return
			}
			mu.Lock()
			seen = append(seen, c.Method)
			mu.Unlock()
			ans := server.HostAnswer{Value: &wire.Value{Type: "json", JSON: []any{c.Method, len(c.Args)}}}
			if c.Method == "fail" {
				ans = server.HostAnswer{Error: &server.HostCallFailed{Code: "type", Message: "fail failed"}}
			}
			b, _ := json.Marshal(ans)
			r, err := d.client.Post(d.base+sp+"/hostcalls/"+c.CallID, "application/json", bytes.NewReader(b))
			if err == nil {
				r.Body.Close()
			}
		}
	}()
	cases := []struct{ code, want string }{
		{"print(host.db.query(1, 'x'))", "['query', 2]"},
		{"try:\n    host.db.drop_all()\nexcept PermissionError as e:\n    print('denied')", "denied"},
		{"try:\n    host.db._private()\nexcept PermissionError as e:\n    print('denied')", "denied"},
		{"try:\n    host.other.query()\nexcept PermissionError as e:\n    print('denied')", "denied"},
		{"try:\n    host.db.fail()\nexcept TypeError as e:\n    print('type:', e)", "type:"},
	}
	for _, tc := range cases {
		var pr wire.PythonResult
		d.ok(t, "POST", sp+"/python", server.PythonRequest{Code: tc.code}, 200, &pr)
		if !pr.OK || !strings.HasPrefix(pr.Transcript, tc.want) {
			t.Errorf("%q: %+v", tc.code, pr)
		}
	}
	cancel()
	<-done
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(seen, ",") != "query,fail" {
		t.Fatalf("the client saw %v; only allowed calls may reach it", seen)
	}
}

// A session no request touches is closed, so a client that vanished frees its
// sandbox; one in use stays.
func TestIdleSessionClosed(t *testing.T) {
	d := startDaemon(t, server.Config{SessionIdle: 300 * time.Millisecond}, server.HandlerOptions{})
	var idle, busy server.SessionInfo
	d.ok(t, "POST", "/v1/sessions", server.SessionRequest{Rung: "host"}, 201, &idle)
	d.ok(t, "POST", "/v1/sessions", server.SessionRequest{Rung: "host"}, 201, &busy)
	testwait.For(t, 30*time.Second, "the idle session to be closed", func() bool {
		d.ok(t, "POST", "/v1/sessions/"+busy.SessionID+"/ping", nil, 200, nil)
		open := false // listing does not touch a session; a GET of it would
		for _, si := range d.svc.Sessions() {
			open = open || si.SessionID == idle.SessionID
		}
		return !open
	})
	// Closing finishes just after the session leaves the list.
	testwait.For(t, 30*time.Second, "the idle session's workspace to be removed", func() bool {
		_, err := os.Stat(filepath.Dir(idle.Workspace))
		return os.IsNotExist(err)
	})
	d.ok(t, "GET", "/v1/sessions/"+busy.SessionID, nil, 200, nil)
}
