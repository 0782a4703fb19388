package session

import (
	"context"
	"strings"
	"testing"

	"github.com/dryexec/dryexec/wire"
)

// echoDispatcher answers every call with its method name and arguments, so a
// test sees exactly which calls got through the session's allowlist.
type echoDispatcher struct{ calls []string }

func (e *echoDispatcher) CallMethod(_ context.Context, method string, args []wire.Value) (wire.Value, error) {
	e.calls = append(e.calls, method)
	if method == "fail" {
		return wire.Value{}, &wire.RemoteError{Code: "type", Message: "fail was told to fail"}
	}
	return JSON(map[string]any{"method": method, "args": len(args)}), nil
}

// A Dispatcher is held to its allowlist by the session: names not listed,
// private names (even listed) and wildcards never reach it.
func TestDispatcherAllowlist(t *testing.T) {
	if _, err := Open(testCtx(t), Options{Rung: "host", HostObjects: map[string]any{"db": &echoDispatcher{}}, Allow: map[string][]string{"db": {"*"}}}); err == nil {
		t.Fatal("a wildcard allowlist for a dispatcher was accepted")
	}
	d := &echoDispatcher{}
	s := openHost(t, Options{HostObjects: map[string]any{"db": d}, Allow: map[string][]string{"db": {"query", "fail", "_secret"}}})
	cases := []struct {
		code, want string
	}{
		{"r = host.db.query(1, 'x')\nprint(r['method'], r['args'])", "query 2"},
		{"try:\n    host.db.drop()\nexcept PermissionError as e:\n    print('denied')", "denied"},
		{"try:\n    host.db.Query()\nexcept PermissionError as e:\n    print('denied')", "denied"},
		{"try:\n    host.db._secret()\nexcept PermissionError as e:\n    print('denied')", "denied"},
		{"try:\n    host.db.fail()\nexcept TypeError as e:\n    print('type', e)", "type"},
	}
	for _, tc := range cases {
		r, err := s.Python(testCtx(t), tc.code, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(strings.TrimSpace(r.Transcript), tc.want) {
			t.Errorf("%q: transcript %q, want %q", tc.code, r.Transcript, tc.want)
		}
	}
	if got := strings.Join(d.calls, ","); got != "query,fail" {
		t.Errorf("the dispatcher saw %q, want only the allowed calls query,fail", got)
	}
}
