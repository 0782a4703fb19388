package conformance

import (
	"context"
	"errors"
	"github.com/dryexec/dryexec/session"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/dryexec/dryexec/wire"
)

// testDB is a host object; calls records every method that ran.
type testDB struct {
	mu    sync.Mutex
	calls []string
	// during, if set, runs inside Peek (a call made while the exec waits).
	during func() string
}

func (d *testDB) record(m string) {
	d.mu.Lock()
	d.calls = append(d.calls, m)
	d.mu.Unlock()
}

type row struct {
	ID   int    `json:"id"`
	Name string `json:"name"`
}

func (d *testDB) Query(filter string, limit int) ([]row, error) {
	d.record("Query")
	var out []row
	for i := range limit {
		out = append(out, row{ID: i, Name: filter})
	}
	return out, nil
}
func (d *testDB) Echo(v any) any       { d.record("Echo"); return v }
func (d *testDB) Blob(b []byte) []byte { d.record("Blob"); return append([]byte("got:"), b...) }
func (d *testDB) Path(p string) string { d.record("Path"); return p }
func (d *testDB) Fail() error          { d.record("Fail"); return errors.New("boom") }
func (d *testDB) Panic()               { d.record("Panic"); panic("oops") }
func (d *testDB) DropAll()             { d.record("DropAll") }
func (d *testDB) Sum(xs ...int) int    { d.record("Sum"); return sum(xs) }
func (d *testDB) WithCtx(ctx context.Context, n int) (int, error) {
	d.record("WithCtx")
	return n * 2, ctx.Err()
}
func (d *testDB) Peek() string { d.record("Peek"); return d.during() }

func sum(xs []int) int {
	t := 0
	for _, x := range xs {
		t += x
	}
	return t
}

// badSig has a method the codec cannot carry.
type badSig struct{}

func (badSig) Chan(c chan int)        {}
func (badSig) Three() (int, int, int) { return 0, 0, 0 }
func (badSig) Fine() int              { return 1 }

var dbAllow = []string{"query", "echo", "blob", "path", "fail", "panic", "sum", "withCtx", "peek", "_secret"}

var hostObjectCases = []conformanceCase{
	{"allow_deny_private_unregistered", func(t *testing.T, open opener) {
		db := &testDB{}
		s := open(t, session.Options{HostObjects: map[string]any{"db": db}, Allow: map[string][]string{"db": dbAllow}})
		r := pyOK(t, s, `import pathlib
r = {}
r['query'] = host.db.query('active', 2)
r['get'] = host.get('db').echo({'a': [1, None, 2.5, 'x']})
r['big'] = host.db.sum(2**60, 1) == 2**60 + 1  # exact through the codec
r['blob'] = host.db.blob(b'abc').decode()
r['path'] = host.db.path(pathlib.Path('data/x'))
r['sum'] = host.db.sum(1, 2, 3)
r['ctx'] = host.db.withCtx(4)
def refused(f):
    try:
        f()
    except PermissionError as e:
        return 'PermissionError: ' + str(e)
    return 'not refused'
r['deny'] = refused(lambda: host.db.drop_all())
r['deny2'] = refused(lambda: host.db.dropAll())
r['private'] = refused(lambda: host.db._secret())
r['unregistered'] = refused(lambda: host.nope.query('x', 1))
try:
    host.db.fail()
except RuntimeError as e:
    r['fail'] = str(e)
try:
    host.db.panic()
except RuntimeError as e:
    r['panic'] = 'RuntimeError'
for name, f in (('type', lambda: host.db.query(1, 2)), ('arity', lambda: host.db.query('a')),
                ('unrep', lambda: host.db.echo(object())), ('kwargs', lambda: host.db.query(filter='a', limit=1))):
    try:
        f()
        r[name] = 'no error'
    except TypeError:
        r[name] = 'TypeError'
`, nil)
		want := map[string]string{
			"query":        `[{"id":0,"name":"active"},{"id":1,"name":"active"}]`,
			"get":          `{"a":[1,null,2.5,"x"]}`,
			"big":          `true`,
			"blob":         `"got:abc"`,
			"path":         `"data/x"`,
			"sum":          `6`,
			"ctx":          `8`,
			"fail":         `"db.fail(): boom"`,
			"panic":        `"RuntimeError"`,
			"type":         `"TypeError"`,
			"arity":        `"TypeError"`,
			"unrep":        `"TypeError"`,
			"kwargs":       `"TypeError"`,
			"deny":         `"PermissionError: host object \"db\": method \"drop_all\" is not allowed"`,
			"deny2":        `"PermissionError: host object \"db\": method \"dropAll\" is not allowed"`,
			"private":      `"PermissionError: host object \"db\": method \"_secret\" is private"`,
			"unregistered": `"PermissionError: there is no host object \"nope\""`,
		}
		got := r.Outputs["r"].JSON.(map[string]any)
		for k, w := range want {
			if g := jsonOf(t, got[k]); g != w {
				t.Errorf("r[%s] = %s, want %s", k, g, w)
			}
		}
		db.mu.Lock()
		defer db.mu.Unlock()
		if slices.Contains(db.calls, "DropAll") {
			t.Errorf("a method outside the allowlist ran: %v", db.calls)
		}
	}},
	{"open_fails_closed", func(t *testing.T, open opener) {
		for _, tc := range []struct {
			name  string
			objs  map[string]any
			allow map[string][]string
			want  string
		}{
			{"no_allow_entry", map[string]any{"db": &testDB{}}, nil, "no Allow entry"},
			{"wildcard", map[string]any{"db": &testDB{}}, map[string][]string{"db": {"*"}}, "wildcard"},
			{"wildcard_pattern", map[string]any{"db": &testDB{}}, map[string][]string{"db": {"query", "q*"}}, "wildcard"},
			{"allow_without_object", map[string]any{}, map[string][]string{"db": {"query"}}, "not a registered host object"},
			{"unknown_method", map[string]any{"db": &testDB{}}, map[string][]string{"db": {"qeury"}}, "no exported method Qeury"},
			{"pointer_method_on_value", map[string]any{"db": testDB{}}, map[string][]string{"db": {"query"}}, "no exported method Query"},
			{"chan_parameter", map[string]any{"b": badSig{}}, map[string][]string{"b": {"chan"}}, "cannot be carried"},
			{"three_results", map[string]any{"b": badSig{}}, map[string][]string{"b": {"three"}}, "results"},
			{"nil_object", map[string]any{"db": nil}, map[string][]string{"db": {}}, "nil"},
		} {
			_, err := session.Open(ctx(t), session.Options{Rung: "host", HostObjects: tc.objs, Allow: tc.allow})
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s: Open: %v, want an error about %q", tc.name, err, tc.want)
			}
		}
		// An empty allowlist and a listed private name are fine: nothing or
		// nothing more is callable.
		s := open(t, session.Options{HostObjects: map[string]any{"b": badSig{}, "e": badSig{}}, Allow: map[string][]string{"b": {"fine", "_x"}, "e": {}}})
		r := pyOK(t, s, `r = [host.b.fine()]
for f in (lambda: host.e.fine(), lambda: host.b._x()):
    try:
        f()
    except PermissionError:
        r.append('PermissionError')`, nil)
		if got := output(t, r, "r"); got != `[1,"PermissionError","PermissionError"]` {
			t.Errorf("r = %s", got)
		}
	}},
	{"guest_calls_during_exec_do_not_deadlock", func(t *testing.T, open opener) {
		var s *session.Session
		db := &testDB{}
		db.during = func() string {
			// Host-side API used while the exec waits for this call.
			s.Cache().Set("from-host", []byte("1"))
			return strings.Join(s.Cache().Keys(), ",") + "|" + string(rune('0'+len(s.Emits())%10))
		}
		s = open(t, session.Options{HostObjects: map[string]any{"db": db}, Allow: map[string][]string{"db": dbAllow},
			OnEmit: func(wire.Emit) { s.Cache().Keys() }})
		r := pyOK(t, s, `out = []
for i in range(30):
    cache['k%d' % i] = str(i)
    emit('i', i)
    out.append(host.db.peek())
    assert cache['k%d' % i] == str(i).encode()
last = out[-1]`, nil)
		if got := output(t, r, "last"); !strings.HasPrefix(got, `"from-host|`) {
			t.Errorf("last = %s", got)
		}
		if len(s.Emits()) != 30 || len(s.Cache().Keys()) != 31 {
			t.Errorf("%d events, %d keys", len(s.Emits()), len(s.Cache().Keys()))
		}
	}},
}
