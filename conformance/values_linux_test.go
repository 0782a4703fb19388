package conformance

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/dryexec/dryexec/session"
	"github.com/dryexec/dryexec/wire"
)

// kwDB is a host object whose methods take keyword arguments: Go has no
// parameter names, so they land in the last parameter, a struct or a map.
type kwDB struct{ testDB }

type findOpts struct {
	Limit int    `json:"limit"`
	Order string `json:"order"`
	Raw   []byte `json:"raw"`
}

func (d *kwDB) Find(name string, o findOpts) map[string]any {
	d.record("Find")
	return map[string]any{"name": name, "limit": o.Limit, "order": o.Order, "raw": string(o.Raw)}
}

func (d *kwDB) Tags(m map[string]any) int { d.record("Tags"); return len(m) }

// evilPickle, unpickled, runs os.system("touch unpickled-here"): protocol 0,
// written by hand. Where the file appears says where unpickling ran.
const evilPickle = "cos\nsystem\n(S'touch unpickled-here'\ntR."

// valueCases: the cache's Python values, host objects by their own name with
// keyword arguments, per-exec output caps, structured prints and the echo,
// and the lazily started Python runner (#20 points 1-4 and 8).
var valueCases = []conformanceCase{
	{"cache_python_values_round_trip", func(t *testing.T, open opener) {
		s := open(t, session.Options{})
		pyOK(t, s, `cache['n'] = 41
cache['d'] = {'a': [1, 2.5, None], 't': (1, 2)}
cache['s'] = 'text'
cache['b'] = b'raw'
cache['set'] = {3, 1}`, nil)
		r := pyOK(t, s, `n = cache['n'] + 1
d = cache['d']
t_ok = d['t'] == (1, 2)
s_ = cache['s']
b = cache['b']
st = sorted(cache.get('set'))
popped = cache.pop('n')
gone = 'n' not in cache`, nil)
		for name, want := range map[string]string{"n": "42", "d": `{"a":[1,2.5,null],"t":[1,2]}`, "t_ok": "true", "st": "[1,3]", "popped": "41", "gone": "true"} {
			if got := output(t, r, name); got != want {
				t.Errorf("%s = %s, want %s", name, got, want)
			}
		}
		// bytes and str keep working as before: both read back as bytes.
		for name, want := range map[string]string{"s_": "text", "b": "raw"} {
			if v := r.Outputs[name]; v.Type != "bytes" || string(v.Bytes) != want {
				t.Errorf("%s = %+v, want bytes %q", name, v, want)
			}
		}
		// The host holds opaque bytes with their kind; it never unpickles.
		for key, kind := range map[string]string{"d": session.CachePickle, "s": "", "b": ""} {
			it, ok := s.Cache().GetEntry(key)
			if !ok || it.Kind != kind {
				t.Errorf("host entry %q: %+v %v, want kind %q", key, it, ok, kind)
			}
		}
	}},
	{"cache_unpicklable_is_type_error", func(t *testing.T, open opener) {
		s := open(t, session.Options{})
		r := pyOK(t, s, `import threading
errs = []
for v in (lambda: 1, threading.Lock()):
    try:
        cache['x'] = v
    except TypeError as e:
        errs.append('pickle' in str(e))
has = 'x' in cache`, nil)
		if got := output(t, r, "errs"); got != "[true,true]" || output(t, r, "has") != "false" {
			t.Errorf("errs %s has %s", got, output(t, r, "has"))
		}
	}},
	{"cache_pickle_unpickled_only_in_the_sandbox", func(t *testing.T, open opener) {
		// A caller-supplied pickle (or one the sandbox wrote) runs code when
		// unpickled: that happens in the sandbox, where the file appears in
		// the workspace, and never on the host.
		s := open(t, session.Options{Cache: map[string]session.CacheItem{
			"evil":     {Value: []byte(evilPickle), Kind: session.CachePickle},
			"n":        {Value: []byte("I41\n."), Kind: session.CachePickle},
			"greeting": {Value: []byte("hi")},
		}})
		r := pyOK(t, s, "n = cache['n']\ng = cache['greeting']\nrc = cache['evil']", nil)
		if output(t, r, "n") != "41" || string(r.Outputs["g"].Bytes) != "hi" || output(t, r, "rc") != "0" {
			t.Fatalf("outputs %v", r.Outputs)
		}
		d, err := s.Diff(ctx(t), false)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Contains(d.Paths(), "unpickled-here") {
			t.Errorf("the pickle did not run in the sandbox's workspace: diff %v", d.Paths())
		}
		if it, _ := s.Cache().GetEntry("evil"); string(it.Value) != evilPickle {
			t.Errorf("the host's bytes changed: %q", it.Value)
		}
		if err := s.Cache().SetEntry("k", session.CacheItem{Value: []byte("x"), Kind: "json"}); !errors.Is(err, session.ErrCacheKind) {
			t.Errorf("kind json: %v, want ErrCacheKind", err)
		}
	}},
	{"cache_readonly_per_exec", func(t *testing.T, open opener) {
		s := open(t, session.Options{Cache: map[string]session.CacheItem{"a": {Value: []byte("1")}}})
		r, err := s.PythonWith(ctx(t), `a = cache['a']
errs = []
for f in (lambda: cache.__setitem__('a', 2), lambda: cache.__delitem__('a'), lambda: cache.__setitem__('new', b'x')):
    try:
        f()
    except PermissionError as e:
        errs.append('read-only' in str(e))`, nil, session.PythonOptions{Timeout: pyTimeout, CacheReadOnly: true})
		if err != nil || !r.OK {
			t.Fatalf("%v %+v", err, r)
		}
		if got := output(t, r, "errs"); got != "[true,true,true]" {
			t.Errorf("errs %s", got)
		}
		pyOK(t, s, "cache['a'] = 2", nil) // the next exec writes again
		if it, _ := s.Cache().GetEntry("a"); it.Kind != session.CachePickle {
			t.Errorf("after a writable exec: %+v", it)
		}
	}},
	{"host_objects_by_own_name_and_kwargs", func(t *testing.T, open opener) {
		db := &kwDB{}
		s := open(t, session.Options{HostObjects: map[string]any{"db": db}, Allow: map[string][]string{"db": {"query", "find", "tags"}}})
		r := pyOK(t, s, `a = db.query('x', 1)
b = host.db.query('y', 1)
f = db.find('n', limit=3, order='desc', raw=b'\x00z')
g = db.tags(m=1, k='v')
same = db is not host.db and repr(db) == '<host object db>'`, nil)
		if got := output(t, r, "a"); got != `[{"id":0,"name":"x"}]` {
			t.Errorf("db.query: %s", got)
		}
		if got := output(t, r, "f"); got != `{"limit":3,"name":"n","order":"desc","raw":"\u0000z"}` {
			t.Errorf("db.find: %s", got)
		}
		if output(t, r, "g") != "2" || output(t, r, "same") != "true" {
			t.Errorf("tags %s same %s", output(t, r, "g"), output(t, r, "same"))
		}
		if _, ok := r.Outputs["db"]; ok {
			t.Error("the injected db is harvested as an output")
		}
		// An input of the same name wins over the injected object.
		r = pyOK(t, s, "v = db", map[string]wire.Value{"db": session.JSON(7)})
		if output(t, r, "v") != "7" {
			t.Errorf("input db: %s", output(t, r, "v"))
		}
		off := open(t, session.Options{NoHostGlobals: true, HostObjects: map[string]any{"db": &testDB{}}, Allow: map[string][]string{"db": {"query"}}})
		r = pyOK(t, off, "try:\n    db\n    e = None\nexcept NameError:\n    e = 'NameError'\nq = host.db.query('z', 1)", nil)
		if output(t, r, "e") != `"NameError"` || output(t, r, "q") != `[{"id":0,"name":"z"}]` {
			t.Errorf("NoHostGlobals: e %s q %s", output(t, r, "e"), output(t, r, "q"))
		}
	}},
	{"host_objects_kwargs_cannot_break_the_allowlist", func(t *testing.T, open opener) {
		db := &kwDB{}
		s := open(t, session.Options{HostObjects: map[string]any{"db": db}, Allow: map[string][]string{"db": {"query", "find", "_secret"}}})
		r := pyOK(t, s, `import math
out = {}
def attempt(name, f):
    try:
        f()
        out[name] = 'ran'
    except Exception as e:
        out[name] = type(e).__name__
attempt('dunder_kw', lambda: db.find('n', __class__=1))
attempt('private_kw', lambda: db.find('n', _limit=1))
attempt('space_kw', lambda: db.find('n', **{'a b': 1}))
attempt('unknown_kw', lambda: db.find('n', nope=1))
attempt('object_kw', lambda: db.find('n', limit=object()))
attempt('nan_kw', lambda: db.find('n', limit=math.nan))
attempt('kw_on_positional', lambda: db.query('x', limit=1))
attempt('too_many_positional', lambda: db.find('n', {}, limit=1))
attempt('dropAll_kw', lambda: db.dropAll(x=1))
attempt('secret', lambda: db._secret(x=1))
attempt('dunder_attr', lambda: db.__class__.__init__)
attempt('dict', lambda: db.__dict__)
attempt('set_attr', lambda: setattr(db, 'query', 1))
attempt('other_object', lambda: host.nope.find(limit=1))`, nil)
		want := map[string]string{
			"dunder_kw": "PermissionError", "private_kw": "PermissionError", "space_kw": "TypeError",
			"unknown_kw": "TypeError", "object_kw": "TypeError", "nan_kw": "TypeError",
			"kw_on_positional": "TypeError", "too_many_positional": "TypeError", "dropAll_kw": "PermissionError",
			"secret": "PermissionError", "set_attr": "AttributeError", "other_object": "PermissionError",
		}
		got := map[string]string{}
		if v, ok := r.Outputs["out"].JSON.(map[string]any); ok {
			for k, x := range v {
				got[k], _ = x.(string)
			}
		}
		for k, w := range want {
			if got[k] != w {
				t.Errorf("%s: %q, want %q", k, got[k], w)
			}
		}
		// db.__class__ is the proxy's own class (a local object, no power);
		// what matters is that nothing reached the host object.
		db.mu.Lock()
		calls := slices.Clone(db.calls)
		db.mu.Unlock()
		if len(calls) != 0 {
			t.Errorf("calls reached the host object: %v", calls)
		}
	}},
	{"host_objects_forged_kwargs_refused_by_the_host", func(t *testing.T, open opener) {
		// The runner is the user's process: code that writes the protocol
		// itself (fd 3, replies on fd 4) meets the same host-side checks.
		db := &kwDB{}
		s := open(t, session.Options{HostObjects: map[string]any{"db": db}, Allow: map[string][]string{"db": {"find"}}})
		r := pyOK(t, s, `import json, os
def raw(msg):
    os.write(3, json.dumps(msg).encode() + b'\n')
    line = b''
    while not line.endswith(b'\n'):
        line += os.read(4, 1)
    return json.loads(line)
j = {'type': 'json', 'json': 1}
codes = [raw({'op': 'hostcall', 'object': 'db', 'method': 'find', 'args': [{'type': 'json', 'json': 'n'}], 'kwargs': kw}).get('code')
         for kw in ({'__class__': j}, {'_x': j}, {'a-b': j}, {'1a': j}, {'limit': {'type': 'pickle', 'bytes': 'eA=='}}, {'limit': {'type': 'json', 'json': 1, 'path': '/etc'}})]`, nil)
		if got := output(t, r, "codes"); got != `["permission","permission","type","type","type","type"]` {
			t.Errorf("codes %s", got)
		}
		if len(db.calls) != 0 {
			t.Errorf("calls reached the host object: %v", db.calls)
		}
	}},
	{"caps_per_exec_python", func(t *testing.T, open opener) {
		s := open(t, session.Options{})
		code := "print('x' * 100)\nprint('y' * 100)\nprint('z' * 5)\nprint('w')"
		r, err := s.PythonWith(ctx(t), code, nil, session.PythonOptions{Timeout: pyTimeout, Caps: &wire.Caps{Entry: 10, Total: 25}})
		if err != nil || !r.OK {
			t.Fatalf("%v %+v", err, r)
		}
		texts := []string{}
		for _, p := range r.Prints {
			texts = append(texts, p.Kind+":"+p.Text)
		}
		m := wire.CapsMarker
		want := []string{":" + strings.Repeat("x", 10) + m, ":" + strings.Repeat("y", 10) + m, ":zzzzz", "dropped:" + m}
		if !slices.Equal(texts, want) || r.PrintsDropped != 1 {
			t.Errorf("prints %q (dropped %d), want %q", texts, r.PrintsDropped, want)
		}
		if !strings.HasPrefix(r.Transcript, m+"\n") || !strings.HasSuffix(r.Transcript, "zzzzz\nw\n") || len(r.Transcript) != len(m)+1+25 {
			t.Errorf("transcript %q", r.Transcript)
		}
		// The next exec has the session's defaults again.
		r = pyOK(t, s, code, nil)
		if len(r.Prints) != 4 || r.Prints[0].Truncated || strings.Contains(r.Transcript, m) {
			t.Errorf("defaults: %+v", r.Prints)
		}
		if _, err := s.PythonWith(ctx(t), "1", nil, session.PythonOptions{Caps: &wire.Caps{Entry: -1}}); !errors.Is(err, session.ErrCaps) {
			t.Errorf("negative caps: %v", err)
		}
	}},
	{"caps_per_exec_shell", func(t *testing.T, open opener) {
		s := open(t, session.Options{OutputCap: 1000})
		r, err := s.ShellWith(ctx(t), "head -c 3000 /dev/zero | tr '\\0' a; printf END", session.ShellOptions{Timeout: pyTimeout, Caps: &wire.Caps{Total: 100}})
		if err != nil {
			t.Fatal(err)
		}
		m := wire.CapsMarker + "\n"
		if !r.Truncated || r.Stdout != m+strings.Repeat("a", 97)+"END" || r.Transcript != r.Stdout {
			t.Errorf("capped: truncated %v stdout %q", r.Truncated, r.Stdout)
		}
		// Over the session's default: more than its 1000 bytes are kept.
		r, err = s.ShellWith(ctx(t), "head -c 3000 /dev/zero | tr '\\0' a", session.ShellOptions{Timeout: pyTimeout, Caps: &wire.Caps{Total: 5000}})
		if err != nil || r.Truncated || len(r.Stdout) != 3000 {
			t.Errorf("raised: %v truncated %v, %d bytes", err, r != nil && r.Truncated, len(r.Stdout))
		}
		if r := sh(t, s, "head -c 3000 /dev/zero | tr '\\0' a"); !r.Truncated || len(r.Stdout) != 1000 || strings.Contains(r.Stdout, wire.CapsMarker) {
			t.Errorf("session default: truncated %v, %d bytes", r.Truncated, len(r.Stdout))
		}
	}},
	{"prints_record_objects", func(t *testing.T, open opener) {
		s := open(t, session.Options{})
		r := pyOK(t, s, "print('a', [1, 2, 3], {'k': 1}, 7)\nprint(list(range(5000)))\nprint()", nil)
		if len(r.Prints) != 3 {
			t.Fatalf("prints %+v", r.Prints)
		}
		type obj struct {
			typ, repr string
			n         int // -1: no len
		}
		var got []obj
		for _, o := range r.Prints[0].Objects {
			n := -1
			if o.Len != nil {
				n = *o.Len
			}
			got = append(got, obj{o.Type, o.Repr, n})
		}
		want := []obj{{"str", "'a'", 1}, {"list", "[1, 2, 3]", 3}, {"dict", "{'k': 1}", 1}, {"int", "7", -1}}
		if !slices.Equal(got, want) {
			t.Errorf("objects %+v, want %+v", got, want)
		}
		big := r.Prints[1].Objects
		if len(big) != 1 || big[0].Len == nil || *big[0].Len != 5000 || !big[0].Truncated || len(big[0].Repr) != wire.PrintReprMax {
			t.Errorf("a big list: %+v", big)
		}
		if len(r.Prints[2].Objects) != 0 {
			t.Errorf("print(): %+v", r.Prints[2].Objects)
		}
	}},
	{"final_expression_echo_entry", func(t *testing.T, open opener) {
		s := open(t, session.Options{})
		r := pyOK(t, s, "x = [1, 2]\nprint('p')\nx * 2", nil)
		if len(r.Prints) != 2 || r.Prints[0].Kind != "" {
			t.Fatalf("prints %+v", r.Prints)
		}
		e := r.Prints[1]
		if e.Kind != "echo" || e.Text != "[1, 2, 1, 2]" || e.Type != "list" || len(e.Objects) != 1 || *e.Objects[0].Len != 4 {
			t.Errorf("echo %+v", e)
		}
		if r.Transcript != "p\n[1, 2, 1, 2]\n" {
			t.Errorf("transcript %q", r.Transcript)
		}
		for _, code := range []string{"None", "x = 1", "print('q')"} {
			r := pyOK(t, s, code, nil)
			if slices.ContainsFunc(r.Prints, func(p wire.PrintEntry) bool { return p.Kind == "echo" }) {
				t.Errorf("%q: an echo entry %+v", code, r.Prints)
			}
		}
	}},
	{"ping_renderer_and_lazy_python", func(t *testing.T, open opener) {
		s := open(t, session.Options{})
		p, err := s.Ping(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		if p.Renderer != wire.PrintRenderer || p.PythonReady {
			t.Errorf("fresh session: renderer %q, python ready %v (want no runner before the first exec_python)", p.Renderer, p.PythonReady)
		}
		sh(t, s, "true")
		if p, _ := s.Ping(ctx(t)); p.PythonReady {
			t.Error("a runner after exec_shell alone")
		}
		pyOK(t, s, "1", nil)
		if p, _ := s.Ping(ctx(t)); !p.PythonReady {
			t.Error("no runner waits after the first exec_python")
		}
		warm := open(t, session.Options{PythonWarm: true})
		if p, _ := warm.Ping(ctx(t)); !p.PythonReady {
			t.Error("PythonWarm: no runner waits")
		}
	}},
}
