package netsim_test

import (
	"bufio"
	"encoding/base64"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/dryexec/dryexec"
	"github.com/dryexec/dryexec/netsim"
)

// TestProxyHostile sends the proxy, over raw connections, what a command
// that wants past its policy would: another session's token, an
// absolute-form request whose Host header names another host than its URL
// (each way round), and a request smuggled behind one that carries both
// Content-Length and Transfer-Encoding. The policy holds (the real server
// sees only the allowed request, with the Host its URL names) and every
// request the proxy took as the sandbox's is in the log with what happened
// to it.
func TestProxyHostile(t *testing.T) {
	var mu sync.Mutex
	var seen []string // "Host path" of each request the real server got
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Host+" "+r.URL.Path)
		mu.Unlock()
		io.Copy(io.Discard, r.Body)
		fmt.Fprint(w, "real")
	}))
	defer up.Close()
	_, port, _ := net.SplitHostPort(up.Listener.Addr().String())
	var portN int
	fmt.Sscan(port, &portN)
	allowed := "127.0.0.1:" + port
	const token = "session-a-token"
	sim := newSim(t, netsim.Config{ProxyToken: token, Allow: []netsim.Rule{{Host: "127.0.0.1", Port: portN}}}, nil)
	proxy := strings.TrimPrefix(serveProxy(t, sim), "http://")
	other := newSim(t, netsim.Config{ProxyToken: "session-b-token"}, nil)
	otherProxy := strings.TrimPrefix(serveProxy(t, other), "http://")
	auth := func(tok string) string {
		return "Proxy-Authorization: Basic " + base64.StdEncoding.EncodeToString([]byte("dryexec:"+tok)) + "\r\n"
	}
	// send writes raw on a new connection to addr and reads n responses.
	send := func(addr, raw string, n int) []int {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, raw); err != nil {
			t.Fatal(err)
		}
		br := bufio.NewReader(c)
		var codes []int
		for range n {
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				break
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			codes = append(codes, resp.StatusCode)
		}
		return codes
	}

	// Another session's token: refused by this session's proxy, and
	// neither session's log has it.
	if got := send(otherProxy, "GET http://"+allowed+"/b-token HTTP/1.1\r\nHost: "+allowed+"\r\n"+auth(token)+"\r\n", 1); len(got) != 1 || got[0] != http.StatusProxyAuthRequired {
		t.Errorf("session A's token at session B's proxy: %v", got)
	}
	// A URL naming a blocked host with a Host header naming the allowed
	// one: judged by the URL, blocked.
	if got := send(proxy, "GET http://blocked.example/fronted HTTP/1.1\r\nHost: "+allowed+"\r\n"+auth(token)+"\r\n", 1); len(got) != 1 || got[0] != http.StatusForbidden {
		t.Errorf("blocked URL, allowed Host: %v", got)
	}
	// The allowed URL with a Host header naming another host: allowed,
	// and the real server is asked for the URL's host, not the header's.
	if got := send(proxy, "GET http://"+allowed+"/hostless HTTP/1.1\r\nHost: evil.example\r\n"+auth(token)+"\r\n", 1); len(got) != 1 || got[0] != http.StatusOK {
		t.Errorf("allowed URL, other Host: %v", got)
	}
	// Content-Length and Transfer-Encoding both: the proxy reads one
	// body; what follows is a request of its own, without the token
	// (refused) then with it to a blocked host (blocked).
	smuggle := "POST http://" + allowed + "/carrier HTTP/1.1\r\nHost: " + allowed + "\r\n" + auth(token) +
		"Content-Length: 60\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n" +
		"GET http://" + allowed + "/smuggled HTTP/1.1\r\nHost: " + allowed + "\r\n\r\n" +
		"GET http://blocked.example/smuggled2 HTTP/1.1\r\nHost: blocked.example\r\n" + auth(token) + "\r\n"
	codes := send(proxy, smuggle, 3)
	t.Logf("smuggling: answers %v", codes)
	mu.Lock()
	got := strings.Join(seen, ",")
	mu.Unlock()
	for _, bad := range []string{"/b-token", "/fronted", "/smuggled", "evil.example"} {
		if strings.Contains(got, bad) {
			t.Errorf("the real server got %q: %s", bad, got)
		}
	}
	if !strings.Contains(got, allowed+" /hostless") {
		t.Errorf("the allowed request did not reach the real server as %s: %s", allowed, got)
	}
	log := sim.Log()
	for _, w := range []struct {
		ev   dryexec.NetworkEvent
		path string
	}{
		{dryexec.NetworkEvent{Host: "blocked.example", Action: netsim.ActionBlocked}, "/fronted"},
		{dryexec.NetworkEvent{Host: "127.0.0.1", Action: netsim.ActionAllowed}, "/hostless"},
		{dryexec.NetworkEvent{Host: "blocked.example", Action: netsim.ActionBlocked}, "/smuggled2"},
	} {
		found := false
		for _, e := range log {
			if e.Host == w.ev.Host && e.Action == w.ev.Action && strings.HasSuffix(e.URL, w.path) {
				found = true
			}
		}
		if !found {
			t.Errorf("no %s event for %s in %s", w.ev.Action, w.path, dumpLog(t, log))
		}
	}
	for _, e := range log {
		if e.Action == netsim.ActionAllowed && !strings.HasSuffix(e.URL, "/hostless") && !strings.HasSuffix(e.URL, "/carrier") {
			t.Errorf("allowed: %+v", e)
		}
	}
	if l := other.Log(); len(l) != 0 {
		t.Errorf("session B's log: %s", dumpLog(t, l))
	}
}
