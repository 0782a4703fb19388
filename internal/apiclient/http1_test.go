package apiclient

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestWireAgainstNetHTTP: the client's HTTP/1.1 reads what Go's own server
// sends — bodies of a known length, chunked ones flushed in pieces, empty
// ones, error statuses — and keeps one connection across requests while the
// server keeps it.
func TestWireAgainstNetHTTP(t *testing.T) {
	var conns atomic.Int32
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/small":
			io.WriteString(w, `{"ok":true}`)
		case "/chunked":
			for _, s := range []string{"one\n", "two\n", strings.Repeat("x", 40000) + "\n"} {
				io.WriteString(w, s)
				w.(http.Flusher).Flush()
			}
		case "/echo":
			b, _ := io.ReadAll(r.Body)
			w.Header().Set("X-Type", r.Header.Get("Content-Type"))
			w.Write(b)
		case "/none":
			w.WriteHeader(http.StatusNoContent)
		case "/close":
			w.Header().Set("Connection", "close")
			io.WriteString(w, "bye")
		default:
			http.Error(w, "no", http.StatusNotFound)
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	defer srv.Close()
	w := &wire{network: "tcp", addr: srv.Listener.Addr().String(), host: "dryexec"}
	for _, tc := range []struct {
		method, path, body string
		status             int
		want               string
		wantConns          int // connections opened so far
	}{
		{"GET", "/small", "", 200, `{"ok":true}`, 1},
		{"GET", "/chunked", "", 200, "one\ntwo\n" + strings.Repeat("x", 40000) + "\n", 1},
		{"POST", "/echo", `{"a":1}`, 200, `{"a":1}`, 1},
		{"POST", "/none", "", 204, "", 1},
		{"GET", "/missing", "", 404, "no\n", 1},
		{"GET", "/close", "", 200, "bye", 1},
		{"GET", "/small", "", 200, `{"ok":true}`, 2}, // the server closed the last one
	} {
		var body []byte
		if tc.body != "" {
			body = []byte(tc.body)
		}
		resp, err := w.do(context.Background(), tc.method, tc.path, [][2]string{{"Content-Type", "application/json"}}, body)
		if err != nil {
			t.Fatalf("%s %s: %v", tc.method, tc.path, err)
		}
		got, err := io.ReadAll(resp.body)
		resp.close()
		if err != nil || resp.status != tc.status || string(got) != tc.want {
			t.Errorf("%s %s: %d %q %v, want %d %q", tc.method, tc.path, resp.status, got, err, tc.status, tc.want)
		}
		if int(conns.Load()) != tc.wantConns {
			t.Errorf("%s %s: %d connections opened, want %d", tc.method, tc.path, conns.Load(), tc.wantConns)
		}
	}
}

// TestWireEndsWithContext: ending the context closes the connection of a
// request whose answer has not come (the daemon then kills the trial), and a
// deadline bounds the wait.
func TestWireEndsWithContext(t *testing.T) {
	gone := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(200)
		w.(http.Flusher).Flush()
		<-r.Context().Done() // the client went away
		close(gone)
	}))
	defer srv.Close()
	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"cancel", func() (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }, context.Canceled},
		{"deadline", func() (context.Context, context.CancelFunc) {
			return context.WithTimeout(context.Background(), 200*time.Millisecond)
		}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			gone = make(chan struct{})
			ctx, cancel := tc.ctx()
			defer cancel()
			w := &wire{network: "tcp", addr: srv.Listener.Addr().String(), host: "dryexec"}
			resp, err := w.do(ctx, "GET", "/", nil, nil)
			if err != nil {
				t.Fatal(err)
			}
			if tc.want != nil {
				cancel()
			}
			_, err = io.ReadAll(resp.body)
			if err == nil {
				t.Fatal("the body ended without an error")
			}
			<-gone
			if tc.want != nil && !errors.Is(ctx.Err(), tc.want) {
				t.Fatalf("ctx: %v", ctx.Err())
			}
		})
	}
}
