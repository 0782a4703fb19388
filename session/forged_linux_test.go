package session

import (
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/dryexec/dryexec/wire"
)

// recorder is a host object that records every method that ran.
type recorder struct {
	mu    sync.Mutex
	calls []string
}

func (d *recorder) record(m string) {
	d.mu.Lock()
	d.calls = append(d.calls, m)
	d.mu.Unlock()
}

func (d *recorder) Query(filter string, limit int) int { d.record("Query"); return limit }
func (d *recorder) Secret() string                     { d.record("Secret"); return "s" }
func (d *recorder) DropAll()                           { d.record("DropAll") }

// TestForgedGuestCallsRefusedOnHost feeds the host side the guest→host frames a
// hostile guest could send, outside and inside an exec. It is white-box (it
// calls serveGuest directly), so it lives here rather than in conformance/.
func TestForgedGuestCallsRefusedOnHost(t *testing.T) {
	// What the sandbox claims does not matter: the host decides. These
	// frames are what a hostile guest could send.
	db := &recorder{}
	s := openHost(t, Options{HostObjects: map[string]any{"db": db}, Allow: map[string][]string{"db": {"query", "_secret"}}, CacheReadOnly: true})
	call := func(verb string, body any, bin ...[]byte) error {
		b, bb, err := wire.EncodeBody(body)
		if err != nil {
			t.Fatal(err)
		}
		f := &wire.Frame{Kind: wire.KindReq, Verb: verb, Body: mustRaw(t, b), Bin: append(bb, bin...)}
		_, _, err = s.serveGuest(testCtx(t), f)
		return err
	}
	code := func(err error) string {
		var re *wire.RemoteError
		if errors.As(err, &re) {
			return re.Code
		}
		return "not a RemoteError: " + errString(err)
	}
	// Outside an exec, nothing is answered.
	if c := code(call(wire.VerbHostCall, &wire.HostCall{Object: "db", Method: "query", Args: []wire.Value{JSON("a"), JSON(1)}})); c != "no_exec" {
		t.Errorf("hostcall outside an exec: %s", c)
	}
	if c := code(call(wire.VerbCacheGet, &wire.CacheRequest{Key: "k"})); c != "no_exec" {
		t.Errorf("cache.get outside an exec: %s", c)
	}
	// A gvisor guest streams its trees only while the host's fork call is
	// in flight, and no more than the limit: the host keeps none of it
	// otherwise.
	if c := code(call(wire.VerbForkData, nil, []byte("tree"))); c != "no_fork" {
		t.Errorf("fork.data outside a fork: %s", c)
	}
	s.fork.in.start()
	s.fork.in.limit = 6
	if err := call(wire.VerbForkData, nil, []byte("tree")); err != nil {
		t.Errorf("fork.data in a fork: %v", err)
	}
	if c := code(call(wire.VerbForkData, nil, []byte("more"))); c != "too_large" {
		t.Errorf("fork.data past the limit: %s", c)
	}
	if c := code(call(wire.VerbForkData, nil, []byte("x"))); c != "no_fork" {
		t.Errorf("fork.data after the limit was passed: %s", c)
	}
	if chunks, size, over := s.fork.in.stop(); len(chunks) != 0 || size != 0 || !over {
		t.Errorf("after too much: %d chunks, %d bytes kept, over %v; want none kept, over", len(chunks), size, over)
	}
	s.cache.begin(false)
	defer s.cache.end(false)
	for _, tc := range []struct {
		name string
		hc   wire.HostCall
		want string
	}{
		{"not_allowed", wire.HostCall{Object: "db", Method: "dropAll", Args: []wire.Value{}}, "permission"},
		{"private_listed", wire.HostCall{Object: "db", Method: "_secret", Args: []wire.Value{}}, "permission"},
		{"unregistered", wire.HostCall{Object: "other", Method: "query", Args: []wire.Value{}}, "permission"},
		{"bad_value", wire.HostCall{Object: "db", Method: "query", Args: []wire.Value{{Type: "pickle"}}}, "type"},
	} {
		if c := code(call(wire.VerbHostCall, &tc.hc)); c != tc.want {
			t.Errorf("%s: %s, want %s", tc.name, c, tc.want)
		}
	}
	if c := code(call(wire.VerbCacheSet, &wire.CacheRequest{Key: "k", Size: 1}, []byte("x"))); c != "read_only" {
		t.Errorf("cache.set in a read-only session: %s", c)
	}
	if c := code(call(wire.VerbEmit, &wire.Emit{Name: "e", Value: wire.Value{Type: "json", Path: "/x"}})); c != "type" {
		t.Errorf("a malformed emit value: %s", c)
	}
	db.mu.Lock()
	defer db.mu.Unlock()
	if len(db.calls) != 0 {
		t.Errorf("methods ran: %v", db.calls)
	}
}

func mustRaw(t *testing.T, b any) []byte {
	t.Helper()
	switch v := b.(type) {
	case json.RawMessage:
		return v
	default:
		return []byte(jsonOf(t, v))
	}
}

func errString(err error) string {
	if err == nil {
		return "nil"
	}
	return err.Error()
}
